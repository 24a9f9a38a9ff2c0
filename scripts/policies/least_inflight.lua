-- least_inflight: the account with the smallest share of its concurrency
-- limit in use; ties go to the least recently granted.

policy = {
  description = "the smallest share of the concurrency limit in use first",
  tie_break = { "least_recent" },
}

function score(a, now)
  local status = a.status
  if status ~= "active" then
    if status ~= "cooling" then return nil end
    local untl = a.cooldown_until
    if untl and untl > now then return nil, nil, untl - now end
  end
  local limit = a.max_inflight
  if limit <= 0 then return nil end
  return 1 - a.inflight / limit
end
