package actors

import (
	"context"
	"log/slog"
	"time"

	"github.com/anthdm/hollywood/actor"
	"github.com/troupe-gw/troupe/storage"
)

// usageConfig configures the usage recorder.
type usageConfig struct {
	store     UsageWriter
	batchSize int           // flush when this many records are pending
	interval  time.Duration // flush at least this often when records are pending
	maxQueued int           // records held (pending + being written) before new ones are dropped
	retryBase time.Duration // first backoff of a failed write, doubling up to retryCap; default 100 ms
	log       *slog.Logger
	onWritten func(n int, err error)
}

// recorder is the usage recorder actor. It batches records and hands each
// batch to one writer goroutine it owns, so storage I/O never blocks its
// mailbox. A batch is handed over when it holds batchSize records, or
// interval after its first record arrived (a timer armed by that record), so
// no record waits in memory longer than interval plus mailbox latency.
// Batches are written in order; a failed batch is retried with backoff
// until it is written (see retry).
//
// What a hard kill (SIGKILL, a crash) can lose is what is in memory:
// the pending batch (at most batchSize-1 records, none older than interval)
// and the batches handed to the writer but not committed — one batch when
// storage keeps up with the traffic. docs/storage.md states the bound.
type recorder struct {
	cfg      usageConfig
	batch    []storage.UsageRecord
	spare    []storage.UsageRecord // a written batch's slice, cleared, for the next batch (nil: none back yet)
	events   []storage.ErrorEvent  // pending error events, written after the batch's records
	first    time.Time             // when the oldest pending record or event arrived
	timer    *time.Timer           // fires interval after first; nil when nothing is pending
	writes   chan usageBatch
	queued   int // records and events handed to the writer and not yet written
	dropped  uint64
	waiters  []chan struct{}
	stop     context.CancelFunc
	stopping chan struct{} // closed when the recorder stops: failing writes get stopAttempts more tries
	done     chan struct{}
	box      *mailCtx // the recorder's own mailbox, for deferWake
}

func newRecorder(cfg usageConfig) func() mailHandler {
	return func() mailHandler { return &recorder{cfg: cfg} }
}

// receive handles recorder messages, on a mailbox of its own (mailbox.go):
// a record reaching an idle recorder wakes its goroutine rather than
// starting one, as hollywood's inbox did for every request. (Not on the
// accounts' pool: a flush may block while the writer is far behind.)
func (r *recorder) receive(c *mailCtx, msg any) {
	switch m := msg.(type) {
	case actor.Started:
		r.box = c
		r.writes = make(chan usageBatch, 1024)
		r.done = make(chan struct{})
		r.stopping = make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		r.stop = cancel
		go r.writer(ctx, c.Engine(), c.PID())
	case actor.Stopped:
		r.flush()
		close(r.writes)
		close(r.stopping)
		<-r.done // the writer drains what it was given; bounded by storage latency
		r.stop()
	case usageRecord:
		rec := *m.rec
		*m.rec = storage.UsageRecord{} // back to its pool, holding no strings
		usageRecs.Put(m.rec)
		if r.pending()+r.queued >= r.cfg.maxQueued {
			r.dropped++
			r.cfg.log.Error("usage record dropped: storage is behind", "queued", r.queued, "dropped", r.dropped)
			return
		}
		r.arm(c)
		r.batch = append(r.batch, rec)
		if r.pending() >= r.cfg.batchSize {
			r.flush()
		}
		r.deferRecords()
	case usageErrors:
		if r.pending()+r.queued+len(m.events) > r.cfg.maxQueued {
			r.dropped += uint64(len(m.events))
			r.cfg.log.Error("error events dropped: storage is behind", "queued", r.queued, "dropped", r.dropped)
			return
		}
		r.arm(c)
		r.events = append(r.events, m.events...)
		if r.pending() >= r.cfg.batchSize {
			r.flush()
		}
		r.deferRecords()
	case usageTick:
		// A tick of a batch already flushed (its timer fired as it was
		// stopped) finds a younger batch, whose own timer is armed.
		if r.pending() > 0 && time.Since(r.first) >= r.cfg.interval {
			r.flush()
		}
	case usageFlush:
		r.flush()
		if r.queued == 0 {
			close(m.done)
		} else {
			r.waiters = append(r.waiters, m.done)
		}
	case usageWritten:
		r.queued -= m.n + m.events
		if r.spare == nil && cap(m.spare) >= r.cfg.batchSize {
			r.spare = m.spare
		}
		if r.cfg.onWritten != nil && (m.n > 0 || m.events == 0) {
			r.cfg.onWritten(m.n, m.err)
		}
		if r.queued == 0 {
			for _, w := range r.waiters {
				close(w)
			}
			r.waiters = nil
		}
	}
}

// pending is how many records and events wait in the current batch.
func (r *recorder) pending() int { return len(r.batch) + len(r.events) }

// arm starts the batch's timer when the batch is empty.
func (r *recorder) arm(c *mailCtx) {
	if r.pending() == 0 {
		r.first = time.Now()
		e, self := c.Engine(), c.PID()
		r.timer = time.AfterFunc(r.cfg.interval, func() { e.Send(self, usageTick{}) })
	}
}

// deferRecords lets records sent while the batch's timer is armed wait in
// the mailbox for the timer's tick instead of each waking the recorder
// (System.Record sends them with sendDeferred): all but the one that fills
// the batch, which wakes it, so a full batch is still written at once and
// the records held in memory stay within what the batch alone held.
func (r *recorder) deferRecords() {
	if r.timer != nil {
		r.box.deferWake(max(r.cfg.batchSize-r.pending()-1, 0))
	}
}

func (r *recorder) flush() {
	if r.timer != nil {
		r.box.deferWake(0) // before the timer stops: nothing may wait for its tick
		r.timer.Stop()
		r.timer = nil
	}
	if r.pending() == 0 {
		return
	}
	b := usageBatch{recs: r.batch, events: r.events}
	// The next batch fills a slice the writer gave back (usageWritten.spare)
	// when there is one: a new one a flush was 500 records' room (128 KB)
	// for a few hundred records, about 375 bytes a request at 1k req/s.
	r.batch, r.spare = r.spare, nil
	if r.batch == nil {
		r.batch = make([]storage.UsageRecord, 0, r.cfg.batchSize)
	}
	r.events = nil
	r.queued += len(b.recs) + len(b.events)
	select {
	case r.writes <- b:
	default:
		// The writer is more than 1024 batches behind; maxQueued bounds this
		// path, so block briefly rather than lose records.
		r.writes <- b
	}
}

// writer writes batches in order. It runs outside the actor and reports back.
func (r *recorder) writer(ctx context.Context, e *actor.Engine, self *actor.PID) {
	defer close(r.done)
	ew, _ := r.cfg.store.(ErrorEventWriter)
	for b := range r.writes {
		var err error
		if len(b.recs) > 0 {
			err = r.retry(ctx, "usage batch", len(b.recs), func(wctx context.Context) error { return r.cfg.store.InsertUsage(wctx, b.recs) })
		}
		if len(b.events) > 0 && ew != nil {
			// A lost events batch is logged by retry; err stays the records'.
			_ = r.retry(ctx, "error events", len(b.events), func(wctx context.Context) error { return ew.InsertErrorEvents(wctx, b.events) })
		}
		var spare []storage.UsageRecord
		if b.recs != nil {
			clear(b.recs) // no strings kept alive by a slice waiting for reuse
			spare = b.recs[:0]
		}
		e.Send(self, usageWritten{n: len(b.recs), events: len(b.events), err: err, at: time.Now(), spare: spare})
	}
}

// Backoff of a failed usage write: 0.1 s doubling, capped at retryCap; once
// the recorder is stopping, a batch gets stopAttempts more tries.
const (
	retryCap     = 5 * time.Second
	stopAttempts = 5
)

func (r *recorder) retryBase() time.Duration {
	if r.cfg.retryBase > 0 {
		return r.cfg.retryBase
	}
	return 100 * time.Millisecond
}

// retry runs write with a 30 s timeout, retrying a failure with backoff
// until it succeeds: a batch is never given up while the recorder runs
// (the store in front of storage journals what storage refuses, so a
// failure here means even that could not take it; the batch waits in
// memory, bounded by maxQueued). Once the recorder is stopping, it gets
// stopAttempts more tries, and a batch still failing is logged as lost.
func (r *recorder) retry(ctx context.Context, what string, n int, write func(context.Context) error) error {
	var err error
	late := 0
	for attempt := 0; ; attempt++ {
		wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = write(wctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			break
		}
		select {
		case <-r.stopping:
			late++
		default:
		}
		if late > stopAttempts {
			break
		}
		r.cfg.log.Warn(what+" write failed; retrying", "rows", n, "attempt", attempt+1, "err", err)
		select {
		case <-time.After(min(r.retryBase()<<min(attempt, 16), retryCap)):
		case <-r.stopping:
		case <-ctx.Done():
		}
	}
	if err != nil {
		r.cfg.log.Error(what+" lost", "rows", n, "err", err)
	}
	return err
}
