package stats

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

func TestBinMidpointWithinSixPercent(t *testing.T) {
	for _, d := range []time.Duration{time.Microsecond, 7 * time.Microsecond, 8 * time.Microsecond, 15 * time.Microsecond,
		999 * time.Microsecond, time.Millisecond, 37 * time.Millisecond, 1234567 * time.Microsecond, 10 * time.Minute} {
		b := bin(d)
		if b >= numBins {
			t.Fatalf("bin(%v) = %d, want < %d", d, b, numBins)
		}
		mid := binMid(b)
		if err := float64(mid-d) / float64(d); err > 0.0625 || err < -0.0625 {
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
	tl.add(5, countMax)
	tl.add(5, 10)
	tl.add(3, 1)
	tl.add(700, 2)
	var d [keySpace]uint64
	tl.merge(&d)
	if d[5] != countMax+10 || d[3] != 1 || d[700] != 2 {
		t.Fatalf("merged counts 5:%d 3:%d 700:%d, want %d, 1, 2", d[5], d[3], d[700], countMax+10)
	}
	if len(tl) != 4 {
		t.Fatalf("%d entries, want 4 (key 5 overflowed into a second)", len(tl))
	}
	if !sort.SliceIsSorted(tl, func(i, j int) bool { return tl[i]>>countBits < tl[j]>>countBits }) {
		t.Fatalf("entries not sorted by key: %x", tl)
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
		if err := float64(got-want) / float64(want); err > 0.07 || err < -0.07 {
			t.Errorf("p%v = %v, sample says %v (%.1f %% off)", q*100, got, want, err*100)
		}
	}
	if quantile(h[:], 0, 0.5) != 0 {
		t.Error("quantile of an empty histogram is not 0")
	}
}
