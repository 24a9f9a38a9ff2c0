package hist

import (
	"math"
	"testing"
	"time"
)

// within reports whether got is within rel (a fraction) of want.
func within(got, want time.Duration, rel float64) bool {
	return math.Abs(float64(got-want)) <= rel*float64(want)
}

func TestQuantilesOfUniformValues(t *testing.T) {
	h := New()
	for i := 1; i <= 10000; i++ { // 1 µs … 10 ms
		h.Record(time.Duration(i) * time.Microsecond)
	}
	if h.Count() != 10000 {
		t.Fatalf("count %d", h.Count())
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5 * time.Millisecond}, {0.9, 9 * time.Millisecond}, {0.99, 9900 * time.Microsecond}, {0.999, 9990 * time.Microsecond}, {1, 10 * time.Millisecond}} {
		if got := h.Quantile(c.q); !within(got, c.want, 0.001) {
			t.Errorf("q%v = %v, want %v ± 0.1%%", c.q, got, c.want)
		}
	}
	if got := h.Mean(); !within(got, 5000500*time.Nanosecond, 0.001) {
		t.Errorf("mean %v", got)
	}
	if got := h.Max(); !within(got, 10*time.Millisecond, 0.001) {
		t.Errorf("max %v", got)
	}
	s := h.Summarize()
	if math.Abs(s.P99us-9900) > 10 || math.Abs(s.P50us-5000) > 5 || s.Count != 10000 {
		t.Errorf("summary %+v", s)
	}
}

func TestClampAndMerge(t *testing.T) {
	a, b := New(), New()
	a.Record(0)         // below 1 ns
	a.Record(time.Hour) // above 10 min
	b.Record(time.Millisecond)
	b.Record(time.Millisecond)
	a.Merge(b)
	if a.Count() != 4 || a.Clamped() != 2 {
		t.Fatalf("count %d clamped %d", a.Count(), a.Clamped())
	}
	if got := a.Quantile(0); got != time.Nanosecond {
		t.Errorf("min %v, want 1ns", got)
	}
	if got := a.Max(); !within(got, 10*time.Minute, 0.001) {
		t.Errorf("max %v, want 10m", got)
	}
	if got := a.Quantile(0.5); !within(got, time.Millisecond, 0.001) {
		t.Errorf("median %v", got)
	}
}

func TestEmpty(t *testing.T) {
	h := New()
	if h.Quantile(0.99) != 0 || h.Mean() != 0 || h.Max() != 0 || h.CDF(10) != nil {
		t.Fatal("empty histogram reads non-zero")
	}
}

func TestCDFAndCurve(t *testing.T) {
	h := New()
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i*i) * time.Microsecond)
	}
	pts := h.CDF(50)
	if len(pts) < 2 || len(pts) > 52 {
		t.Fatalf("%d points", len(pts))
	}
	for i := 1; i < len(pts); i++ {
		if pts[i].Q < pts[i-1].Q || pts[i].Us < pts[i-1].Us {
			t.Fatalf("not monotone at %d: %+v then %+v", i, pts[i-1], pts[i])
		}
	}
	if last := pts[len(pts)-1]; last.Q != 1 || math.Abs(last.Us-1e6) > 1e3 {
		t.Fatalf("last point %+v, want q 1 at 1 s", last)
	}
	c := h.Curve()
	if len(c) != len(Grid) || c[0].Q != 0 || c[len(c)-1].Q != 1 {
		t.Fatalf("curve %+v", c)
	}
	if math.Abs(c[5].Us-250000)/250000 > 0.002 { // Grid[5] = 0.5: the 500th value, 500² µs
		t.Fatalf("curve at 0.5: %v µs", c[5].Us)
	}
}
