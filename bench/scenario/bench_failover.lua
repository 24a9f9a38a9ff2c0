-- bench_failover: round_robin, but higher priority first.
--
-- The load-test harness's failover measurement gives each request a routing
-- group of k failing accounts (priority 1) and one healthy account
-- (priority 0): the failing ones are tried first, then the healthy one.
-- Among accounts of equal priority (the default group), every usable account
-- in turn, least recently granted first.

policy = {
  description = "round_robin with priority first (troupe bench failover)",
  tie_break = { "priority", "least_recent" },
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
