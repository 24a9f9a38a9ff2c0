-- round_robin: every usable account in turn.
--
-- All usable accounts score the same, so the scheduler's tie-break decides:
-- the account granted a lease least recently goes next.

policy = {
  description = "every usable account in turn (least recently granted first)",
  tie_break = { "least_recent" },
}

function score(a, now)
  local status = a.status
  if status ~= "active" then
    if status ~= "cooling" then return nil end
    local untl = a.cooldown_until
    if untl and untl > now then return nil, nil, untl - now end
  end
  return 0
end
