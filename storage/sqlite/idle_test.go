package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/troupe-gw/troupe/storage/storagetest"
)

// TestIdleReleaseAfterLastWrite: writes closer together than after keep the
// release off; the first gap of after releases once; a stopped idleRelease
// never releases.
func TestIdleReleaseAfterLastWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		r := &idleRelease{after: time.Second, release: func() { n.Add(1) }}
		for range 10 { // a steady load: a write every 500 ms for 5 s
			r.wrote()
			time.Sleep(500 * time.Millisecond)
		}
		if got := n.Load(); got != 0 {
			t.Fatalf("%d releases under a steady load, want 0", got)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := n.Load(); got != 1 {
			t.Fatalf("%d releases a second after the last write, want 1", got)
		}
		time.Sleep(time.Minute)
		if got := n.Load(); got != 1 {
			t.Fatalf("%d releases after a quiet minute, want still 1", got)
		}
		r.wrote()
		r.stop()
		r.wrote()
		time.Sleep(time.Minute)
		if got := n.Load(); got != 1 {
			t.Fatalf("%d releases after stop, want still 1", got)
		}
	})
}

// TestWriterCacheReleasedWhenIdle: after a batch the writer's cache is
// released (the hook fires), and the store goes on writing and reading.
func TestWriterCacheReleasedWhenIdle(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "troupe.db"), testSealer(t))
	released := make(chan struct{}, 1)
	s.idle.after = time.Millisecond // before the first write: nothing reads it yet
	s.released = func() {
		select {
		case released <- struct{}{}:
		default:
		}
	}
	ctx := context.Background()
	recs := storagetest.VariedUsage("r", 0, 1000)
	for i := 0; i < 500; i += 250 {
		if err := s.InsertUsage(ctx, recs[i:i+250]); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-released:
	case <-time.After(time.Minute): // a failure bound, not a wait for the release
		t.Fatal("the writer's cache was not released after the last batch")
	}
	if err := s.InsertUsage(ctx, recs[500:]); err != nil {
		t.Fatal(err)
	}
	if n, err := s.CountUsage(ctx); err != nil || n != 1000 {
		t.Errorf("CountUsage = %d, %v; want 1000", n, err)
	}
}

// TestMemoryStoreKeepsItsCache: an in-memory store's pages are its data; it
// arms no release.
func TestMemoryStoreKeepsItsCache(t *testing.T) {
	s := openAt(t, MemoryPath, testSealer(t))
	if err := s.InsertUsage(context.Background(), storagetest.VariedUsage("r", 0, 10)); err != nil {
		t.Fatal(err)
	}
	s.idle.mu.Lock()
	armed := s.idle.timer != nil
	s.idle.mu.Unlock()
	if armed {
		t.Error("an in-memory store armed the release of its cache")
	}
}

// BenchmarkInsertUsageAfterRelease is BenchmarkInsertUsageRecorderDurations
// with the writer's cache released before every batch (untimed, release=each)
// or never (release=never): what a batch costs when it reads its pages back
// from the operating system's file cache, as the first batch after an idle
// second does. Besides benchInsert's figures, reads/batch is the process's
// read system calls a batch (/proc/self/io syscr, Linux only).
func BenchmarkInsertUsageAfterRelease(b *testing.B) {
	for _, each := range []bool{false, true} {
		name := "release=never"
		if each {
			name = "release=each"
		}
		b.Run(name, func(b *testing.B) {
			s, recs, start, rng := recorderSetup(b)
			next := recorderDurations(recs, start, rng)
			batches := 0
			r0 := readCalls()
			benchInsert(b, s, recs, func(n int) {
				next(n)
				if each {
					s.releaseWriterCache()
				}
				batches++
			})
			if r0 >= 0 && batches > 0 {
				b.ReportMetric(float64(readCalls()-r0)/float64(batches), "reads/batch")
			}
		})
	}
}

// readCalls returns the process's read system calls so far, or -1 where
// /proc/self/io cannot be read.
func readCalls() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "syscr: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}
