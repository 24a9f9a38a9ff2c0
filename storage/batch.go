package storage

import (
	"context"
	"fmt"
	"time"
)

// CacheOpKind names what a CacheOp does.
type CacheOpKind uint8

// The operations a batch can hold: Cache's entry and counter methods.
const (
	CacheGet   CacheOpKind = iota + 1 // Cache.Get(Key): Value and Found
	CacheSet                          // Cache.Set(Key, Value, TTL)
	CacheIncr                         // Cache.Incr(Key, N, TTL as the window): Total
	CacheCount                        // Cache.Count(Key, TTL as the window): Total
	// CacheGuard is a CacheCount (Key, TTL as the window: Total) that
	// guards the rest of the batch: when its total is 0 — the counter was
	// never counted, has expired, or was lost with the cache (Redis
	// restarted empty) — every later CacheIncr, CacheCount and CacheGuard
	// of the batch is Skipped, not run. A guard is never Over; its Limit is
	// ignored. In a shared backend the guard and the counter ops it guards
	// are atomic (one Redis script), so a caller that keeps a marker
	// counter beside its own counts learns whether they are all still in
	// the cache and changes them only then (billing's holds do).
	CacheGuard
)

// CacheOp is one operation of a batch (Batcher): what to do, and once the
// batch has run, what came of it.
type CacheOp struct {
	Kind  CacheOpKind
	Key   string
	Value string        // CacheSet: the value stored; CacheGet: the value found
	N     int64         // CacheIncr: the amount added
	TTL   time.Duration // CacheSet: the entry's ttl; CacheIncr and CacheCount: the window
	// Limit, when positive, makes a CacheIncr or CacheCount a limit check:
	// see Batcher.
	Limit int64

	Found   bool  // CacheGet: the key was present
	Total   int64 // CacheIncr, CacheCount: the window's total after the op
	Over    bool  // a limit check refused: see Batcher
	Skipped bool  // not run, because an earlier limit check of the batch refused
	Err     error // the op's error, as the Cache method would return it
}

// over reports whether op, a limit check that ran, refuses.
func (op *CacheOp) over() bool {
	switch {
	case op.Limit <= 0 || op.Err != nil || op.Kind == CacheGuard:
		return false // no limit; or a failed check, which lets the request through
	case op.Kind == CacheIncr:
		return op.Total > op.Limit
	case op.Kind == CacheCount:
		return op.Total >= op.Limit
	}
	return false
}

// Settle sets op.Over from op.Total and op.Limit, as a Batcher does after
// the op ran, and reports it: a CacheIncr is over when its new total
// exceeds the limit (the increment stays, as with Incr: a refused request
// still counts in its window), a CacheCount when its total has reached it.
// A failed op is never over: limits are a guard, not a dependency.
func (op *CacheOp) Settle() bool {
	op.Over = op.over()
	return op.Over
}

// Batcher is a Cache that runs several operations in one round trip (one
// pipeline to Redis). It is an optional capability: call Batch, which uses
// it when the cache has it and otherwise makes one call per operation,
// with the same results.
//
// The ops run in order; each op's outcome is written into it. The limit
// checks among them (ops with a positive Limit) are a chain: once one is
// Over, the later limit checks of the batch are Skipped, not run, so a
// request refused by one limit is not charged to the next (a refused
// requests-per-minute check does not count against the day); ops without
// a limit always run. The chain is atomic in a shared backend (one Redis
// script). Ops of other kinds, or with a ttl or window that is not
// positive, fail alone (Err wraps ErrInvalid); when the backend cannot be
// reached, every op that did not run has an Err wrapping
// ErrCacheUnavailable.
type Batcher interface {
	Cache
	// Batch runs ops and returns the first Err among them (FirstError),
	// so a caller that does not look at each op still learns that one
	// failed.
	Batch(ctx context.Context, ops []CacheOp) error
}

// Batch runs ops on c: in one round trip when c is a Batcher, else one
// call each, in order, with the same results (see Batcher).
func Batch(ctx context.Context, c Cache, ops []CacheOp) error {
	if b, ok := c.(Batcher); ok {
		return b.Batch(ctx, ops)
	}
	return RunOps(ctx, c, ops)
}

// RunOps runs ops on c one call at a time, with Batcher's semantics: the
// implementation of Batch for a cache without round trips to save (the
// in-memory one), and for one that is not a Batcher.
func RunOps(ctx context.Context, c Cache, ops []CacheOp) error {
	refused, guarded := false, false
	for i := range ops {
		op := &ops[i]
		op.Found, op.Total, op.Over, op.Skipped, op.Err = false, 0, false, false, nil
		counter := op.Kind == CacheIncr || op.Kind == CacheCount || op.Kind == CacheGuard
		if counter && (guarded || op.Limit > 0 && refused && op.Kind != CacheGuard) {
			op.Skipped = true
			continue
		}
		switch op.Kind {
		case CacheGet:
			op.Value, op.Found, op.Err = c.Get(ctx, op.Key)
		case CacheSet:
			op.Err = c.Set(ctx, op.Key, op.Value, op.TTL)
		case CacheIncr:
			op.Total, op.Err = c.Incr(ctx, op.Key, op.N, op.TTL)
		case CacheCount:
			op.Total, op.Err = c.Count(ctx, op.Key, op.TTL)
		case CacheGuard:
			op.Total, op.Err = c.Count(ctx, op.Key, op.TTL)
			guarded = op.Err == nil && op.Total == 0
			continue
		default:
			op.Err = ErrInvalidOp
		}
		if op.Settle() {
			refused = true
		}
	}
	return FirstError(ops)
}

// ErrInvalidOp is the Err of a CacheOp whose Kind is none of the
// CacheOpKinds; it wraps ErrInvalid.
var ErrInvalidOp = fmt.Errorf("%w: cache: batch operation of no known kind", ErrInvalid)

// FirstError returns the Err of the first op that has one, or nil.
func FirstError(ops []CacheOp) error {
	for i := range ops {
		if ops[i].Err != nil {
			return ops[i].Err
		}
	}
	return nil
}
