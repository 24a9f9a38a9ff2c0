-- sticky: requests of one session keep their account while it is available.
--
-- route() names the stickiness key: the client's session key, or, without
-- one, the API key and model. The scheduler sends a key's requests to the
-- account it last used while that account is available and under its
-- limit; otherwise it picks by score (least in-flight share) and the key
-- moves to the new account. A key is forgotten after sticky_ttl seconds
-- without use.

policy = {
  description = "one session (or API key and model) keeps its account while it is available",
  sticky_ttl = 3600,
  tie_break = { "least_inflight", "least_recent" },
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

function route(r)
  local key = r.session_key
  if key == "" then
    if r.api_key.id == "" then return nil end
    key = "key:" .. r.api_key.id .. ":" .. r.model
  end
  return { sticky_key = key }
end
