package gateway

import (
	"context"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// settle is the request's one cache round trip after its answer (best
// effort, logged): the tokens served charged to the key's daily budget,
// and when the request succeeded, the affinity of its response respID (""
// for none; a stream records it itself before relaying it: remember) and of
// its session, to the account that served it.
func (s *Server) settle(c *call, account, respID string, ok bool) {
	if s.cache == nil {
		return
	}
	buf := getOps()
	defer putOps(buf)
	ops := buf[:0]
	if tokens := c.usage.InputTokens + c.usage.OutputTokens; c.key.Limits.TokensPerDay > 0 && tokens > 0 {
		ops = append(ops, storage.CacheOp{Kind: storage.CacheIncr, Key: tokensKey(c.key), N: tokens, TTL: day})
	}
	if key := responseKey(respID); ok && key != "" {
		ops = append(ops, storage.CacheOp{Kind: storage.CacheSet, Key: key, Value: responseValue(account, c.key.ID), TTL: AffinityTTL})
	}
	if ok && c.session != "" {
		ops = append(ops, storage.CacheOp{Kind: storage.CacheSet, Key: c.sessionEntry(), Value: account, TTL: s.cfg.SessionAffinityTTL})
	}
	if len(ops) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = storage.Batch(ctx, s.cache, ops)
	for i := range ops {
		switch op := &ops[i]; {
		case op.Err == nil:
		case op.Kind == storage.CacheIncr:
			s.limitError(op.Err)
		default:
			s.log.Debug("affinity not recorded", "err", op.Err)
		}
	}
}
