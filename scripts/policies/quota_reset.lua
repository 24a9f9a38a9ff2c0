-- quota_reset: drain the accounts whose usage windows reset soonest.
--
-- Quota left in a window is lost when the window resets, so the account
-- whose next reset (over its windows that are not used up) comes first is
-- used first: the score is minus that reset time, which does not change as
-- time passes, and recheck_after is the time until it. An account with a
-- used-up window (100 %) is excluded until the last such window resets.
-- Accounts that report no windows come after every account that does.

policy = {
  description = "use first the quota that expires first; skip accounts with a used-up window until it resets",
  tie_break = { "least_inflight", "least_recent" },
}

function score(a, now)
  local status = a.status
  if status ~= "active" then
    if status ~= "cooling" then return nil end
    local untl = a.cooldown_until
    if untl and untl > now then return nil, nil, untl - now end
  end
  local soonest, blocked
  local windows = a.usage_windows
  for i = 1, #windows do
    local w = windows[i]
    local resets = w.resets_at
    if resets and resets > now then
      if w.used_percent >= 100 then
        if blocked == nil or resets > blocked then blocked = resets end
      elseif soonest == nil or resets < soonest then
        soonest = resets
      end
    end
  end
  if blocked then return nil, nil, blocked - now end
  if soonest == nil then return -1e12 end
  return -soonest, nil, soonest - now
end
