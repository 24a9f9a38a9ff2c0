-- smart: Troupe's default policy, the seed gateways' health scoring, with
-- the load spread over every account that is as good as the best.
--
-- Every usable account starts at 100 points:
--   401 (auth)                      -50, decaying to 0 over 24 h
--   429 (quota or rate)             -22, decaying to 0 over 1 h
--   timeout                         -18, decaying to 0 over 15 min
--   5xx / other transient failure   -12, decaying to 0 over 15 min
--   consecutive failures            -6 each, at most -24
--   7-day usage window              -10 from 70 % used, -40 from 100 %
--   EWMA latency                    -4 from 5 s, -15 from 20 s
--   EWMA success rate               -8 below 75 %, -15 below 50 %
--   success streak                  +2 each, at most +12, never above 100:
--                                   it wins back penalties, it does not
--                                   lift an account above a fresh one
-- Penalties decay linearly in whole points: a penalty of P points over W
-- seconds loses one point every W/P seconds, so the score is constant
-- between steps and recheck_after is the time to the next step (or to the
-- 7-day window's reset, or to the end of a cooldown).
-- Tiers: healthy from 80 points, warm from 50, risky below; the scheduler
-- lets a warm account hold half its concurrency and a risky one a single
-- lease.
-- Spreading: scores in the same band of 10 points (91-100, 81-90, ...) are
-- equally good (score_band); among them the account with the most free
-- capacity (least_inflight), then the one granted a lease least recently,
-- is picked, so equally good accounts take turns instead of the best score
-- taking every request. 15 % of picks go to one of the best 3.

policy = {
  description = "health tiers from decaying 401/429/timeout/5xx penalties, failure and success streaks, 7-day usage, latency and success rate; load spread over the accounts within 10 points of each other (most free capacity, then least recently used, first); 15% of picks among the top 3",
  top_k = 3,
  jitter = 0.15,
  score_band = 10,
  tie_break = { "least_inflight", "least_recent" },
  concurrency = { healthy = "max", warm = "max/2", risky = 1 },
}

local floor, min = math.floor, math.min

local WEEK_MINUTES = 7 * 24 * 60

-- decay returns the points still applied `age` seconds after a failure, for
-- a penalty of `points` decaying over `window` seconds, and the seconds until
-- the next point drops (nil when none is applied).
local function decay(points, window, age)
  if age < 0 then age = 0 end -- a failure stamped in the future counts as now
  if age >= window then return 0, nil end
  local step = window / points
  local dropped = floor(age / step)
  return points - dropped, (dropped + 1) * step - age
end

function score(a, now)
  local status = a.status
  if status ~= "active" then
    if status ~= "cooling" then return nil end
    local untl = a.cooldown_until
    if untl and untl > now then return nil, nil, untl - now end
  end

  local s, recheck = 100, nil
  local lf = a.last_failure
  local p, r

  local at = lf.auth
  if at then
    p, r = decay(50, 24 * 3600, now - at)
    s = s - p
    if r and (recheck == nil or r < recheck) then recheck = r end
  end

  at = lf.quota
  local rated = lf.rate
  if rated and (at == nil or rated > at) then at = rated end
  if at then
    p, r = decay(22, 3600, now - at)
    s = s - p
    if r and (recheck == nil or r < recheck) then recheck = r end
  end

  at = lf.timeout
  if at then
    p, r = decay(18, 15 * 60, now - at)
    s = s - p
    if r and (recheck == nil or r < recheck) then recheck = r end
  end

  at = lf.transient
  if at then
    p, r = decay(12, 15 * 60, now - at)
    s = s - p
    if r and (recheck == nil or r < recheck) then recheck = r end
  end

  s = s - min(6 * a.failure_streak, 24)

  local windows, used = a.usage_windows, nil
  for i = 1, #windows do
    local w = windows[i]
    if w.window_minutes == WEEK_MINUTES then
      local resets, pct = w.resets_at, w.used_percent
      if resets == nil or resets > now then -- a window past its reset counts as unused
        if used == nil or pct > used then used = pct end
        if resets and pct >= 70 then
          r = resets - now
          if recheck == nil or r < recheck then recheck = r end
        end
      end
    end
  end
  if used then
    if used >= 100 then s = s - 40 elseif used >= 70 then s = s - 10 end
  end

  local latency = a.ewma_latency_ms
  if latency >= 20000 then s = s - 15 elseif latency >= 5000 then s = s - 4 end

  if a.successes + a.failures > 0 then
    local rate = a.ewma_success
    if rate < 0.5 then s = s - 15 elseif rate < 0.75 then s = s - 8 end
  end

  if s < 100 then s = min(100, s + min(2 * a.success_streak, 12)) end

  local tier
  if s >= 80 then tier = "healthy" elseif s >= 50 then tier = "warm" else tier = "risky" end
  return s, tier, recheck
end
