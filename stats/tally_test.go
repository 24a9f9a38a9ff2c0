package stats

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/upstream"
)

func TestBinMidpointWithinAnEighth(t *testing.T) {
	for _, d := range []time.Duration{time.Microsecond, 7 * time.Microsecond, 8 * time.Microsecond, 15 * time.Microsecond,
		999 * time.Microsecond, time.Millisecond, 1023 * time.Microsecond, 1024 * time.Microsecond, 37 * time.Millisecond, 1234567 * time.Microsecond, 10 * time.Minute} {
		b := bin(d)
		if b >= numBins {
			t.Fatalf("bin(%v) = %d, want < %d", d, b, numBins)
		}
		mid := binMid(b)
		if err := float64(mid-d) / float64(d); err > 0.125 || err < -0.125 {
			t.Errorf("bin(%v) = %d, midpoint %v: %.1f %% off", d, b, mid, err*100)
		}
	}
	if b := bin(time.Hour); b != numBins-1 {
		t.Errorf("bin(1h) = %d, want the last bin %d", b, numBins-1)
	}
	if b := bin(0); b != 0 {
		t.Errorf("bin(0) = %d, want 0", b)
	}
	prev := uint32(0)
	for us := 1; us < 1<<22; us += 1 + us/100 {
		b := bin(time.Duration(us) * time.Microsecond)
		if b < prev {
			t.Fatalf("bins not monotonic at %d µs: %d after %d", us, b, prev)
		}
		prev = b
	}
}

func TestTallyCountsPastTheEntryLimit(t *testing.T) {
	var tl tally
	tl.add(2, 5, countMax)
	tl.add(2, 5, 10)
	tl.add(2, 3, 1)
	tl.add(2, 290, 2)
	tl.add(1, 5, 7) // another slot, sorted before
	var d [keySpace]uint64
	tl.slot(2).merge(&d)
	if d[5] != countMax+10 || d[3] != 1 || d[290] != 2 {
		t.Fatalf("merged counts 5:%d 3:%d 290:%d, want %d, 1, 2", d[5], d[3], d[290], countMax+10)
	}
	if len(tl) != 5 || len(tl.slot(2)) != 4 || len(tl.slot(1)) != 1 || len(tl.slot(0)) != 0 {
		t.Fatalf("%d entries (%d in slot 2, %d in slot 1), want 5, 4 (key 5 overflowed into a second), 1", len(tl), len(tl.slot(2)), len(tl.slot(1)))
	}
	if !sort.SliceIsSorted(tl, func(i, j int) bool { return tagOf(tl[i]) < tagOf(tl[j]) }) {
		t.Fatalf("entries not sorted by slot and key: %x", tl)
	}
	c := cap(tl)
	tl.clear(2)
	if len(tl) != 1 || cap(tl) != c || tl.slot(1)[0]&countMax != 7 {
		t.Fatalf("after clearing slot 2: %x (cap %d, was %d), want slot 1's one entry in the same arena", tl, cap(tl), c)
	}
	tl.clear(0)
	tl.clear(15)
	if len(tl) != 1 {
		t.Fatalf("clearing empty slots dropped entries: %x", tl)
	}
}

func TestTokenDigitsCarry(t *testing.T) {
	var tl tally
	var want uint64
	for _, v := range []uint64{1, countMax, countMax, 1 << 40, 123456789, 1} {
		tl.addWide(3, keyTokens+tokenDigits, v)
		want += v
	}
	var m merged
	tl.merge(&m.counts)
	m.digitTokens()
	if uint64(m.tokens[1]) != want || m.tokens[0] != 0 {
		t.Fatalf("tokens %+v, want output %d", m.tokens, want)
	}
	for _, e := range tl {
		if e&countMax == 0 && tagOf(e) != tag(3, keyTokens+tokenDigits) {
			t.Fatalf("a zero digit entry was opened: %x", tl)
		}
	}
}

func TestStatusesCapped(t *testing.T) {
	for st, want := range map[int]string{0: "0", 200: "200", 429: "429", 529: "529", 201: "2xx", 418: "4xx", 599: "5xx", 302: "3xx", 42: "other", 1000: "other", -1: "other"} {
		if got := statusName(int(statusKey(st))); got != want {
			t.Errorf("status %d is counted as %q, want %q", st, got, want)
		}
	}
	if numStatusKeys > keyTokens-keyStatus {
		t.Fatalf("%d status keys overflow their range of %d", numStatusKeys, keyTokens-keyStatus)
	}
	if keySpace > 1<<keyBits || upstream.NumClasses > keyStatus-keyClass {
		t.Fatalf("key space %d over %d bits, or %d classes over their range", keySpace, keyBits, upstream.NumClasses)
	}
}

func TestQuantileMatchesSortedSample(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h [numBins]uint64
	vals := make([]time.Duration, 5000)
	for i := range vals {
		vals[i] = time.Duration(r.ExpFloat64()*200e3) * time.Microsecond
		h[bin(vals[i])]++
	}
	sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
	for _, q := range []float64{0.5, 0.95, 0.99} {
		want := vals[int(q*float64(len(vals)))-1]
		got := quantile(h[:], uint64(len(vals)), q)
		if err := float64(got-want) / float64(want); err > 0.125 || err < -0.125 {
			t.Errorf("p%v = %v, sample says %v (%.1f %% off)", q*100, got, want, err*100)
		}
	}
	if quantile(h[:], 0, 0.5) != 0 {
		t.Error("quantile of an empty histogram is not 0")
	}
}
