// Package memtrim gives the memory a burst of load left behind back to the
// operating system once the burst is over.
//
// The Go runtime sizes its heap by the live heap of the last collection, and
// collects when allocation reaches that size again. After a burst (thousands
// of connections and requests in flight) the heap is large; once the load
// falls, little is allocated, so no collection comes to shrink it, and the
// burst's free memory stays resident for minutes (docs/benchmarks.md, issue
// 21). A Trimmer looks at the runtime's counters every Config.Every and,
// when the burst is over, calls debug.FreeOSMemory: a collection, then every
// free page returned to the operating system.
//
// "Over" means both:
//   - the allocation rate of the last interval is at most 1/Config.Fall of
//     the highest rate seen since the previous trim (or since start), so a
//     steady load, high or low, never trims, and a trim needs a new burst
//     after it before there is another;
//   - a trim would return at least Config.MinFree: the heap's free pages
//     not yet returned plus the garbage a collection would free.
//
// and at least Config.MinGap has passed since the previous trim, so however
// the load moves it costs at most one collection and one scavenge of the
// heap per MinGap. The collection runs concurrently with the program (only
// the caller, the Trimmer's goroutine, waits); returning the pages holds the
// heap's lock while it runs, a few milliseconds per hundred megabytes.
package memtrim

import (
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// Config tunes a Trimmer. Zero fields take the defaults given.
type Config struct {
	// Every is how often the runtime's counters are read; default 1 s.
	Every time.Duration
	// Fall is how far the allocation rate must fall from its peak for a
	// trim: to at most 1/Fall of it; default 8.
	Fall float64
	// MinFree is the least memory, in bytes, that a trim must be able to
	// return; default 64 MiB.
	MinFree uint64
	// MinGap is the least time between two trims; default 30 s.
	MinGap time.Duration
}

// Defaults of Config's fields.
const (
	DefaultEvery   = time.Second
	DefaultFall    = 8
	DefaultMinFree = 64 << 20
	DefaultMinGap  = 30 * time.Second
)

func (c Config) withDefaults() Config {
	if c.Every <= 0 {
		c.Every = DefaultEvery
	}
	if c.Fall <= 1 {
		c.Fall = DefaultFall
	}
	if c.MinFree == 0 {
		c.MinFree = DefaultMinFree
	}
	if c.MinGap <= 0 {
		c.MinGap = DefaultMinGap
	}
	return c
}

// Stats are a Trimmer's counters since it started.
type Stats struct {
	Trims    uint64        // trims done
	Returned uint64        // bytes the trims returned to the operating system (the drop of the heap's resident pages)
	Took     time.Duration // time the trims took, collections included
}

// sample is what a Trimmer reads of the runtime at each look.
type sample struct {
	allocs   uint64 // bytes allocated on the heap since the program started
	free     uint64 // bytes a trim could return: free pages not yet returned, and garbage
	resident uint64 // bytes the runtime holds and has not returned (for Stats.Returned)
}

// Trimmer trims the heap after bursts (see the package comment). Build it
// with Start; it is safe for concurrent use.
type Trimmer struct {
	trig  trigger
	every time.Duration
	read  func() sample
	trim  func()

	trims, returned, took atomic.Uint64
	stop                  chan struct{}
	stopOnce              sync.Once
	done                  chan struct{}
}

// Start starts a Trimmer's goroutine; Stop ends it.
func Start(cfg Config) *Trimmer {
	return start(cfg, readRuntime, debug.FreeOSMemory)
}

func start(cfg Config, read func() sample, trim func()) *Trimmer {
	cfg = cfg.withDefaults()
	t := &Trimmer{trig: trigger{fall: cfg.Fall, minFree: cfg.MinFree, minGap: cfg.MinGap},
		every: cfg.Every, read: read, trim: trim, stop: make(chan struct{}), done: make(chan struct{})}
	go t.loop()
	return t
}

// Stop ends the Trimmer's goroutine and waits for it (a trim under way
// finishes first). It may be called more than once.
func (t *Trimmer) Stop() {
	t.stopOnce.Do(func() { close(t.stop) })
	<-t.done
}

// Stats returns the Trimmer's counters.
func (t *Trimmer) Stats() Stats {
	return Stats{Trims: t.trims.Load(), Returned: t.returned.Load(), Took: time.Duration(t.took.Load())}
}

func (t *Trimmer) loop() {
	defer close(t.done)
	tick := time.NewTicker(t.every)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
			t.look()
		}
	}
}

// look reads the runtime and trims when the trigger says so.
func (t *Trimmer) look() {
	s := t.read()
	start := time.Now()
	if !t.trig.observe(start, s.allocs, s.free) {
		return
	}
	t.trim()
	took := time.Since(start)
	after := t.read()
	t.trims.Add(1)
	if s.resident > after.resident {
		t.returned.Add(s.resident - after.resident)
	}
	t.took.Add(uint64(took))
	// The trim's own collection is not load: start the rate afresh.
	t.trig.rebase(time.Now(), after.allocs)
}

// trigger decides when to trim, from the samples it is shown (see the
// package comment). Its zero value is not usable.
type trigger struct {
	fall    float64
	minFree uint64
	minGap  time.Duration

	primed bool
	at     time.Time // the last sample's time
	allocs uint64    // the last sample's allocation count
	peak   float64   // the highest allocation rate since the last trim, bytes/s
	last   time.Time // the last trim; zero: none yet
}

// observe takes a sample (at now: allocs bytes allocated so far, free
// bytes a trim could return) and reports whether to trim now.
func (g *trigger) observe(now time.Time, allocs, free uint64) bool {
	if !g.primed || !now.After(g.at) || allocs < g.allocs {
		g.rebase(now, allocs)
		return false
	}
	rate := float64(allocs-g.allocs) / now.Sub(g.at).Seconds()
	g.at, g.allocs = now, allocs
	g.peak = max(g.peak, rate)
	if rate*g.fall >= g.peak || free < g.minFree || (!g.last.IsZero() && now.Sub(g.last) < g.minGap) {
		return false
	}
	g.last = now
	g.peak = rate // the next trim needs a new burst
	return true
}

// rebase starts measuring the rate afresh from (now, allocs).
func (g *trigger) rebase(now time.Time, allocs uint64) {
	g.primed, g.at, g.allocs = true, now, allocs
}

// The runtime's counters read at each look (runtime/metrics).
var metricNames = [...]string{
	"/gc/heap/allocs:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/objects:bytes",
	"/gc/heap/live:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
}

// readRuntime reads a sample of this process's runtime. The trimmer's
// goroutine alone calls it.
func readRuntime() sample {
	var ms [len(metricNames)]metrics.Sample
	for i, n := range metricNames {
		ms[i].Name = n
	}
	metrics.Read(ms[:])
	v := func(i int) uint64 {
		if ms[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return ms[i].Value.Uint64()
	}
	s := sample{allocs: v(0), free: v(1)}
	if objects, live := v(2), v(3); objects > live {
		s.free += objects - live
	}
	if total, released := v(4), v(5); total > released {
		s.resident = total - released
	}
	return s
}
