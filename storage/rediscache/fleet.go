package rediscache

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/troupe-gw/troupe/storage"
)

var _ storage.Membership = (*Cache)(nil)

// Keys of the live set (storage.Membership), under the prefix:
//
//	<prefix>f:live   sorted set: member ID, scored by its expiry (Unix ms, server clock)
//	<prefix>f:info   hash: member ID → its announcement (JSON: addr, started ms)
//	<prefix>f:seen   hash: member ID → its last announcement (Unix ms, server clock)
func (c *Cache) liveKey() string { return c.prefix + "f:live" }
func (c *Cache) infoKey() string { return c.prefix + "f:info" }
func (c *Cache) seenKey() string { return c.prefix + "f:seen" }

// heartbeatScript announces ARGV[1] (announcement ARGV[2]) live for ARGV[3]
// ms on the server's clock, drops the members whose expiry has passed (from
// all three keys), keeps the keys alive for ARGV[4] ms (so an abandoned
// deployment's set goes away), and returns the live members as triples: id,
// announcement, ms since its last announcement (the server's clock).
var heartbeatScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for _, id in ipairs(gone) do
  redis.call('HDEL', KEYS[2], id)
  redis.call('HDEL', KEYS[3], id)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[1], now)
for i = 1, 3 do
  redis.call('PEXPIRE', KEYS[i], ARGV[4])
end
local info = redis.call('HGETALL', KEYS[2])
local out = {}
for i = 1, #info, 2 do
  local seen = tonumber(redis.call('HGET', KEYS[3], info[i]) or now)
  out[#out + 1] = info[i]
  out[#out + 1] = info[i + 1]
  out[#out + 1] = tostring(math.max(now - seen, 0))
end
return out
`)

// leaveScript removes ARGV[1] from the live set.
var leaveScript = redis.NewScript(`
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return redis.call('HDEL', KEYS[2], ARGV[1])
`)

// announcement is a member's stored announcement.
type announcement struct {
	Addr    string `json:"addr,omitempty"`
	Started int64  `json:"started"` // Unix ms
}

// keepMembers is how long the live set's keys outlive the last heartbeat:
// long past any member's ttl, so they only go when the deployment is gone.
const keepMembers = time.Hour

// Heartbeat announces m as live for ttl (whole milliseconds, rounded up)
// on the Redis server's clock, drops the members whose ttl has passed and
// returns the live members ordered by ID, in one script. See
// storage.Membership.
func (c *Cache) Heartbeat(ctx context.Context, m storage.FleetMember, ttl time.Duration) ([]storage.FleetMember, error) {
	if ttl <= 0 {
		return nil, invalid("ttl", ttl)
	}
	if m.ID == "" {
		return nil, fmt.Errorf("%w: rediscache: member id is empty", storage.ErrInvalid)
	}
	ann, err := json.Marshal(announcement{Addr: m.Addr, Started: m.Started.UnixMilli()})
	if err != nil {
		return nil, fmt.Errorf("rediscache: heartbeat: %w", err)
	}
	keep := max(ceilMs(ttl), keepMembers.Milliseconds())
	res, err := heartbeatScript.Run(ctx, c.rdb, []string{c.liveKey(), c.infoKey(), c.seenKey()}, m.ID, ann, ceilMs(ttl), keep).StringSlice()
	if err != nil {
		return nil, c.wrap(ctx, "heartbeat", err)
	}
	out := make([]storage.FleetMember, 0, len(res)/3)
	for i := 0; i+2 < len(res); i += 3 {
		var a announcement
		if err := json.Unmarshal([]byte(res[i+1]), &a); err != nil {
			continue // not an announcement of ours: ignore rather than fail every heartbeat
		}
		age, _ := strconv.ParseInt(res[i+2], 10, 64)
		out = append(out, storage.FleetMember{ID: res[i], Addr: a.Addr, Started: time.UnixMilli(a.Started).UTC(), Age: time.Duration(age) * time.Millisecond})
	}
	slices.SortFunc(out, func(a, b storage.FleetMember) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Leave removes id from the live set. See storage.Membership.
func (c *Cache) Leave(ctx context.Context, id string) error {
	err := leaveScript.Run(ctx, c.rdb, []string{c.liveKey(), c.infoKey(), c.seenKey()}, id).Err()
	return c.wrap(ctx, "leave", err)
}

var _ storage.Ownership = (*Cache)(nil)

// Ownership leases (storage.Ownership), under the prefix:
//
//	<prefix>f:own:<account>  "<holder>|<token>", PX ttl
//	<prefix>f:tok            hash: account → its last token (never decreases while the deployment lives)
//	<prefix>f:drained        hash: account → the token last released drained (until the next take)
func (c *Cache) tokenKey() string   { return c.prefix + "f:tok" }
func (c *Cache) drainedKey() string { return c.prefix + "f:drained" }

// renewScript takes (free), renews (held by ARGV[1]) or, when want is 0
// or 2 (drained), releases (held by ARGV[1]) the lease of each account of
// the pairs ARGV[4..] (account, want) for ARGV[2] ms; lease keys are
// ARGV[3] .. account. A new holder's token is HINCRBY KEYS[1] account 1; a
// drained release records its token in KEYS[2], and a take is clean when
// the account had no token or its last one was released drained. Both
// hashes are kept a day past the last call. It returns holder, token and
// clean ('1' or '0') for each account.
var renewScript = redis.NewScript(`
local out = {}
for i = 4, #ARGV, 2 do
  local acc, want = ARGV[i], ARGV[i + 1]
  local k = ARGV[3] .. acc
  local v = redis.call('GET', k)
  local holder, tok, clean = '', '0', '0'
  if v then
    holder, tok = string.match(v, '^(.*)|(%d+)$')
    if not holder then holder, tok = '', '0' end
  end
  if want == '1' then
    if not v then
      local last = redis.call('HGET', KEYS[1], acc)
      if (not last) or redis.call('HGET', KEYS[2], acc) == last then clean = '1' end
      redis.call('HDEL', KEYS[2], acc)
      tok = tostring(redis.call('HINCRBY', KEYS[1], acc, 1))
      holder = ARGV[1]
      redis.call('SET', k, holder .. '|' .. tok, 'PX', ARGV[2])
    elseif holder == ARGV[1] then
      redis.call('PEXPIRE', k, ARGV[2])
    end
  elseif v and holder == ARGV[1] then
    if want == '2' then redis.call('HSET', KEYS[2], acc, tok) end
    redis.call('DEL', k)
    holder, tok = '', '0'
  end
  out[#out + 1] = holder
  out[#out + 1] = tok
  out[#out + 1] = clean
end
redis.call('PEXPIRE', KEYS[1], 86400000)
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[2], 86400000) end
return out
`)

// renewChunk is how many claims one renewal script handles. A script runs
// alone on the Redis server: at 10,000 accounts over three instances one
// script for an instance's 3,300 leases held Redis and waited past the
// client's read timeout (200 ms) on a loaded host, and the instance lost
// every lease. 256 claims take about a millisecond of the server's time.
const renewChunk = 256

// Renew takes, renews or releases owner's leases of claims, renewChunk
// claims per script (one round trip each), on the Redis server's clock,
// with ttl rounded up to whole milliseconds. See storage.Ownership. On an
// error the claims of earlier chunks may have been applied on the server
// (the next renewal reads them back: a lease held by owner is renewed, not
// taken again). The lease keys are named in the script rather than
// declared, so it needs a single Redis (not a cluster).
func (c *Cache) Renew(ctx context.Context, owner string, claims []storage.OwnershipClaim, ttl time.Duration) error {
	if ttl <= 0 {
		return invalid("ttl", ttl)
	}
	if owner == "" {
		return fmt.Errorf("%w: rediscache: lease owner is empty", storage.ErrInvalid)
	}
	for len(claims) > 0 {
		n := min(len(claims), renewChunk)
		if err := c.renew(ctx, owner, claims[:n], ttl); err != nil {
			return err
		}
		claims = claims[n:]
	}
	return nil
}

// renew is Renew for at most renewChunk claims: one script.
func (c *Cache) renew(ctx context.Context, owner string, claims []storage.OwnershipClaim, ttl time.Duration) error {
	args := make([]any, 0, 3+2*len(claims))
	args = append(args, owner, ceilMs(ttl), c.prefix+"f:own:")
	for _, cl := range claims {
		want := "0"
		switch {
		case cl.Want:
			want = "1"
		case cl.Drained:
			want = "2"
		}
		args = append(args, cl.Account, want)
	}
	res, err := renewScript.Run(ctx, c.rdb, []string{c.tokenKey(), c.drainedKey()}, args...).StringSlice()
	if err != nil {
		return c.wrap(ctx, "renew", err)
	}
	if len(res) != 3*len(claims) {
		return c.wrap(ctx, "renew", errShortReply)
	}
	for i := range claims {
		claims[i].Holder = res[3*i]
		claims[i].Token, _ = strconv.ParseUint(res[3*i+1], 10, 64)
		claims[i].Clean = res[3*i+2] == "1"
	}
	return nil
}
