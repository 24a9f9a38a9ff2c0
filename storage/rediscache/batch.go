package rediscache

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/troupe-gw/troupe/storage"
)

var _ storage.Batcher = (*Cache)(nil)

// batchScript runs the counter operations of a batch in order, atomically,
// on the Redis server's clock: KEYS[i] is a counter key and ARGV[4i-3..4i]
// its kind ("i": Incr, "c": Count, "g": a guard, storage.CacheGuard),
// amount, window in ms and limit (0: none). Each counter is kept as
// incrScript keeps it. Once a limit check refuses (an increment past its
// limit, a count at it), the later limit checks are not run; once a guard
// finds its counter at 0, no later counter op is run. It returns two
// numbers per counter: 1 when it ran (0 when skipped), then its total.
var batchScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
local refused = false
local guarded = false
for i = 1, #KEYS do
  local a = 4 * (i - 1)
  local kind, n, w, lim = ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local v = 0
  if guarded or (refused and lim > 0) then
    out[2 * i - 1] = 0
  else
    local e = string.format('%.0f', now - now % w + w)
    if kind == 'i' then
      if redis.call('HGET', KEYS[i], 'e') == e then
        v = redis.call('HINCRBY', KEYS[i], 'n', n)
        if v < 0 then
          redis.call('HSET', KEYS[i], 'n', 0)
          v = 0
        end
      else
        if tonumber(n) < 0 then n = '0' end
        redis.call('HSET', KEYS[i], 'e', e, 'n', n)
        v = tonumber(n)
        redis.call('PEXPIREAT', KEYS[i], e)
      end
      if lim > 0 and v > lim then refused = true end
    elseif kind == 'g' then
      local r = redis.call('HMGET', KEYS[i], 'e', 'n')
      if r[1] == e then v = tonumber(r[2]) end
      if v == 0 then guarded = true end
    else
      local r = redis.call('HMGET', KEYS[i], 'e', 'n')
      if r[1] == e then v = tonumber(r[2]) end
      if lim > 0 and v >= lim then refused = true end
    end
    out[2 * i - 1] = 1
  end
  out[2 * i] = v
end
return out
`)

// Batch runs ops in one round trip: a pipeline of GET and SET commands
// and, for the counter operations, one batchScript call (so the limit
// chain is atomic). Entries and counters are separate namespaces, so the
// script's place in the pipeline is not observable; within each family the
// ops run in order. After a restart has emptied Redis's script cache the
// script alone is sent once more. See storage.Batcher.
func (c *Cache) Batch(ctx context.Context, ops []storage.CacheOp) error {
	pipe := c.rdb.Pipeline()
	cmds := make([]redis.Cmder, len(ops))
	var keys []string
	var args []any
	var counters []int // indexes into ops of the counter ops sent
	for i := range ops {
		op := &ops[i]
		op.Found, op.Total, op.Over, op.Skipped, op.Err = false, 0, false, false, nil
		switch op.Kind {
		case storage.CacheGet:
			cmds[i] = pipe.Get(ctx, c.entryKey(op.Key))
		case storage.CacheSet:
			if op.TTL <= 0 {
				op.Err = invalid("ttl", op.TTL)
				continue
			}
			cmds[i] = pipe.Do(ctx, "SET", c.entryKey(op.Key), op.Value, "PX", ceilMs(op.TTL))
		case storage.CacheIncr, storage.CacheCount, storage.CacheGuard:
			if op.TTL <= 0 {
				op.Err = invalid("window", op.TTL)
				continue
			}
			w := ceilMs(op.TTL)
			kind, n, lim := "c", int64(0), max(op.Limit, 0)
			switch op.Kind {
			case storage.CacheIncr:
				kind, n = "i", op.N
			case storage.CacheGuard:
				kind, lim = "g", 0
			}
			keys = append(keys, c.counterKey(op.Key, w))
			args = append(args, kind, n, w, lim)
			counters = append(counters, i)
		default:
			op.Err = storage.ErrInvalidOp
		}
	}
	var script *redis.Cmd
	if len(counters) > 0 {
		script = batchScript.EvalSha(ctx, pipe, keys, args...)
	}
	if pipe.Len() > 0 {
		_, _ = pipe.Exec(ctx) // each command carries its own error
	}
	if script != nil && isNoScript(script.Err()) {
		script = batchScript.Run(ctx, c.rdb, keys, args...)
	}
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		op := &ops[i]
		switch cmd := cmd.(type) {
		case *redis.StringCmd: // GET
			v, err := cmd.Result()
			switch {
			case err == redis.Nil:
			case err != nil:
				op.Err = c.wrap(ctx, "batch get", err)
			default:
				op.Value, op.Found = v, true
			}
		default: // SET
			op.Err = c.wrap(ctx, "batch set", cmd.Err())
		}
	}
	if script != nil {
		c.settleCounters(ctx, ops, counters, script)
	}
	return storage.FirstError(ops)
}

// settleCounters writes batchScript's results into the counter ops it ran.
func (c *Cache) settleCounters(ctx context.Context, ops []storage.CacheOp, counters []int, script *redis.Cmd) {
	res, err := script.Int64Slice()
	if err == nil && len(res) != 2*len(counters) {
		err = errShortReply
	}
	for j, i := range counters {
		op := &ops[i]
		if err != nil {
			op.Err = c.wrap(ctx, "batch counters", err)
			continue
		}
		op.Skipped = res[2*j] == 0
		op.Total = res[2*j+1]
		if !op.Skipped {
			op.Settle()
		}
	}
}

// errShortReply is a batch script's reply that does not hold a result for
// every counter sent.
var errShortReply = errors.New("batch script: short reply")

// isNoScript reports whether err is Redis's NOSCRIPT reply: the script is
// not in the server's script cache (emptied by a restart or SCRIPT FLUSH),
// so it did not run.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
