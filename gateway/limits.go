package gateway

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// Limit windows. Counters live in the cache (Redis in production), so limits
// are exact across instances; with the in-memory cache they are per process.
const (
	minute = time.Minute
	day    = 24 * time.Hour
)

func errRateLimited(what string, limit int64, retry time.Duration) *APIError {
	return &APIError{Status: 429, Type: "requests", Code: "rate_limit_exceeded", RetryAfter: retry,
		Message: "Rate limit reached for this API key: " + strconv.FormatInt(limit, 10) + " " + what + ". Please try again later."}
}

// untilWindowEnd is the time left in the epoch-aligned window of length w.
func untilWindowEnd(now time.Time, w time.Duration) time.Duration {
	return w - time.Duration(now.UnixNano()%int64(w))
}

// admit is the request's one cache round trip before routing: it charges
// one request against the key's RPM and RPD windows, checks its daily
// token budget, and reads the affinity entry entry ("" reads none; pin
// applies it). The limits are a chain (storage.Batcher): a request refused
// per minute is not charged to the day. It returns the entry's value (""
// when absent) or the 429 of the first limit that refused. A cache
// failure lets the request through (limits are a guard, not a dependency)
// and is logged; the entry then reads as absent.
func (s *Server) admit(ctx context.Context, k *storage.APIKey, entry string) (string, *APIError) {
	if s.cache == nil {
		return "", nil
	}
	buf := getOps()
	defer putOps(buf)
	ops := appendLimitChecks(buf[:0], k)
	limits := len(ops)
	if entry != "" {
		ops = append(ops, storage.CacheOp{Kind: storage.CacheGet, Key: entry})
	}
	if len(ops) == 0 {
		return "", nil
	}
	_ = storage.Batch(ctx, s.cache, ops) // each op carries its error
	if aerr := s.limitRefusal(ops[:limits], k); aerr != nil {
		return "", aerr
	}
	if entry == "" {
		return "", nil
	}
	op := &ops[limits]
	if op.Err != nil {
		s.log.Debug("affinity not read", "err", op.Err)
	}
	return op.Value, nil
}

// opBufs holds the op arrays of admit's and settle's cache round trips. An
// array on the stack escaped (the ops go through the storage.Cache
// interface): two allocations of 288 and 384 bytes a request (issue 21,
// docs/benchmarks.md: the bytes a request allocates set how often the
// collector runs). Every Batch implementation is done with its ops when it
// returns.
var opBufs = sync.Pool{New: func() any { return new([4]storage.CacheOp) }}

// getOps returns an array of ops from opBufs, all zero; putOps gives it
// back once its ops are read.
func getOps() *[4]storage.CacheOp { return opBufs.Get().(*[4]storage.CacheOp) }

// putOps zeroes buf, so that the pool does not hold the request's keys,
// values and errors, and returns it to opBufs.
func putOps(buf *[4]storage.CacheOp) {
	*buf = [4]storage.CacheOp{}
	opBufs.Put(buf)
}

// appendLimitChecks appends k's limit checks to ops: RPM and RPD charged,
// then the daily token budget checked (each only when the key has it).
func appendLimitChecks(ops []storage.CacheOp, k *storage.APIKey) []storage.CacheOp {
	l := k.Limits
	if l.RPM > 0 {
		ops = append(ops, storage.CacheOp{Kind: storage.CacheIncr, Key: "rl:rpm:" + k.ID, N: 1, TTL: minute, Limit: l.RPM})
	}
	if l.RPD > 0 {
		ops = append(ops, storage.CacheOp{Kind: storage.CacheIncr, Key: "rl:rpd:" + k.ID, N: 1, TTL: day, Limit: l.RPD})
	}
	if l.TokensPerDay > 0 {
		ops = append(ops, storage.CacheOp{Kind: storage.CacheCount, Key: tokensKey(k), TTL: day, Limit: l.TokensPerDay})
	}
	return ops
}

func tokensKey(k *storage.APIKey) string { return "rl:tpd:" + k.ID }

// limitRefusal is the 429 of the limit check in checks (appendLimitChecks,
// run) that refused, or nil; a check that failed is logged and passes.
func (s *Server) limitRefusal(checks []storage.CacheOp, k *storage.APIKey) *APIError {
	for i := range checks {
		op := &checks[i]
		switch {
		case op.Err != nil:
			s.limitError(op.Err)
		case !op.Over:
		case op.Kind == storage.CacheCount:
			return &APIError{Status: 429, Type: "tokens", Code: "rate_limit_exceeded", RetryAfter: untilWindowEnd(s.now(), day),
				Message: "This API key has used its daily token budget (" + strconv.FormatInt(op.Limit, 10) + " tokens). It resets at 00:00 UTC."}
		case op.TTL == minute:
			return errRateLimited("requests per minute", op.Limit, untilWindowEnd(s.now(), minute))
		default:
			return errRateLimited("requests per day", op.Limit, untilWindowEnd(s.now(), day))
		}
	}
	return nil
}

func (s *Server) limitError(err error) {
	if errors.Is(err, storage.ErrCacheUnavailable) {
		s.log.Debug("rate limit counter unavailable; request admitted", "err", err)
		return
	}
	s.log.Warn("rate limit counter", "err", err)
}
