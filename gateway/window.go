package gateway

import (
	"sync/atomic"
	"time"

	"github.com/troupe-gw/troupe/upstream"
)

// classWindow counts upstream attempt outcomes by failure class in one-minute
// buckets over the last hour, lock-free: each bucket remembers the minute it
// holds and is reset by the first writer of a new minute. Reads sum the
// buckets of the minutes asked for.
type classWindow struct {
	buckets [60]classBucket
}

type classBucket struct {
	minute atomic.Int64
	counts [upstream.NumClasses]atomic.Int64 // index 0 (ClassNone) counts successes
}

func (w *classWindow) add(now time.Time, c upstream.Class) {
	m := now.Unix() / 60
	b := &w.buckets[m%60]
	if old := b.minute.Load(); old != m && b.minute.CompareAndSwap(old, m) {
		for i := range b.counts {
			b.counts[i].Store(0)
		}
	}
	b.counts[c].Add(1)
}

// sum returns the counts of the last n minutes (1–60), the current one included.
func (w *classWindow) sum(now time.Time, n int) [upstream.NumClasses]int64 {
	var out [upstream.NumClasses]int64
	m := now.Unix() / 60
	for i := range min(max(n, 1), 60) {
		b := &w.buckets[(m-int64(i))%60]
		if b.minute.Load() != m-int64(i) {
			continue
		}
		for c := range out {
			out[c] += b.counts[c].Load()
		}
	}
	return out
}

// failoverCounts counts client requests by the failovers they needed (0, 1,
// 2, 3, 4 or more) since start.
type failoverCounts [5]atomic.Int64

func (f *failoverCounts) add(n int) { f[min(max(n, 0), 4)].Add(1) }
