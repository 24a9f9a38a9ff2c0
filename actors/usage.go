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
	log       *slog.Logger
	onWritten func(n int, err error)
}

// recorder is the usage recorder actor. It batches records and hands each
// batch to one writer goroutine it owns, so storage I/O never blocks its
// mailbox. A batch is handed over when it holds batchSize records, or
// interval after its first record arrived (a timer armed by that record), so
// no record waits in memory longer than interval plus mailbox latency.
// Batches are written in order; a failed batch is retried with backoff (up
// to 5 times) until it is written or the recorder stops.
//
// What a hard kill (SIGKILL, a crash) can lose is what is in memory:
// the pending batch (at most batchSize-1 records, none older than interval)
// and the batches handed to the writer but not committed — one batch when
// storage keeps up with the traffic. docs/storage.md states the bound.
type recorder struct {
	cfg     usageConfig
	batch   []storage.UsageRecord
	first   time.Time   // when the oldest pending record arrived
	timer   *time.Timer // fires interval after first; nil when the batch is empty
	writes  chan []storage.UsageRecord
	queued  int // records handed to the writer and not yet written
	dropped uint64
	waiters []chan struct{}
	stop    context.CancelFunc
	done    chan struct{}
}

func newRecorder(cfg usageConfig) actor.Producer {
	return func() actor.Receiver { return &recorder{cfg: cfg} }
}

// Receive handles recorder messages.
func (r *recorder) Receive(c *actor.Context) {
	switch m := c.Message().(type) {
	case actor.Started:
		r.writes = make(chan []storage.UsageRecord, 1024)
		r.done = make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		r.stop = cancel
		go r.writer(ctx, c.Engine(), c.PID())
	case actor.Stopped:
		r.flush()
		close(r.writes)
		<-r.done // the writer drains what it was given; bounded by storage latency
		r.stop()
	case usageRecord:
		if len(r.batch)+r.queued >= r.cfg.maxQueued {
			r.dropped++
			r.cfg.log.Error("usage record dropped: storage is behind", "queued", r.queued, "dropped", r.dropped)
			return
		}
		if len(r.batch) == 0 {
			r.first = time.Now()
			e, self := c.Engine(), c.PID()
			r.timer = time.AfterFunc(r.cfg.interval, func() { e.Send(self, usageTick{}) })
		}
		r.batch = append(r.batch, m.rec)
		if len(r.batch) >= r.cfg.batchSize {
			r.flush()
		}
	case usageTick:
		// A tick of a batch already flushed (its timer fired as it was
		// stopped) finds a younger batch, whose own timer is armed.
		if len(r.batch) > 0 && time.Since(r.first) >= r.cfg.interval {
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
		r.queued -= m.n
		if r.cfg.onWritten != nil {
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

func (r *recorder) flush() {
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	if len(r.batch) == 0 {
		return
	}
	b := r.batch
	r.batch = make([]storage.UsageRecord, 0, r.cfg.batchSize)
	r.queued += len(b)
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
	for b := range r.writes {
		var err error
		for attempt := 0; ; attempt++ {
			wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err = r.cfg.store.InsertUsage(wctx, b)
			cancel()
			if err == nil || ctx.Err() != nil || attempt >= 5 {
				break
			}
			r.cfg.log.Warn("usage batch write failed; retrying", "records", len(b), "attempt", attempt+1, "err", err)
			select {
			case <-time.After(time.Duration(100<<attempt) * time.Millisecond):
			case <-ctx.Done():
			}
		}
		if err != nil {
			r.cfg.log.Error("usage batch lost", "records", len(b), "err", err)
		}
		e.Send(self, usageWritten{n: len(b), err: err, at: time.Now()})
	}
}
