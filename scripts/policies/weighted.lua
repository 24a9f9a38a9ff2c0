-- weighted: traffic in proportion to each account's weight.
--
-- The weight is the number in a tag "weight:N" (N > 0; "weight:0" excludes
-- the account), else the priority when it is positive, else 1. The score is
-- minus the account's leases (granted plus in flight) per unit of weight,
-- so the account furthest below its share goes next (stride scheduling):
-- over many requests each account's share of grants approaches
-- weight / total weight. Counters start at 0 when Troupe starts, so an
-- account added later catches up to its share first.

policy = {
  description = "requests in proportion to each account's weight (tag weight:N, else priority, else 1)",
  tie_break = { "least_recent" },
}

local sub, tonumber = string.sub, tonumber

local function weight(a)
  local tags = a.tags
  for i = 1, #tags do
    local tag = tags[i]
    if #tag > 7 and sub(tag, 1, 7) == "weight:" then
      local n = tonumber(sub(tag, 8))
      if n and n >= 0 then return n end
    end
  end
  if a.priority > 0 then return a.priority end
  return 1
end

function score(a, now)
  local status = a.status
  if status ~= "active" then
    if status ~= "cooling" then return nil end
    local untl = a.cooldown_until
    if untl and untl > now then return nil, nil, untl - now end
  end
  local w = weight(a)
  if w <= 0 then return nil end
  return -(a.requests + a.inflight) / w
end
