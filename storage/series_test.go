package storage

import (
	"errors"
	"testing"
	"time"
)

func TestLatencyBins(t *testing.T) {
	if LatencyBinUpper[0] != 1000 || LatencyBinUpper[1] != 1250 {
		t.Fatalf("first bounds %v", LatencyBinUpper[:2])
	}
	for i := 1; i < len(LatencyBinUpper); i++ {
		if LatencyBinUpper[i] <= LatencyBinUpper[i-1] {
			t.Fatalf("bounds not increasing at %d: %v", i, LatencyBinUpper[i-1:i+1])
		}
	}
	cases := map[time.Duration]int{0: 0, 999 * time.Microsecond: 0, time.Millisecond: 1, 1249 * time.Microsecond: 1,
		1250 * time.Microsecond: 2, time.Hour: NumLatencyBins - 1}
	for d, want := range cases {
		if got := LatencyBin(d); got != want {
			t.Errorf("LatencyBin(%v) = %d, want %d", d, got, want)
		}
	}
}

// Quantiles read from the histogram are within a bin's width (25 %) of
// the exact ones.
func TestLatencyQuantile(t *testing.T) {
	var h LatencyHistogram
	if h.Quantile(0.5) != 0 {
		t.Fatal("the quantile of nothing is not 0")
	}
	for i := 1; i <= 1000; i++ {
		h.Add(time.Duration(i) * time.Millisecond) // 1 ms … 1 s
	}
	for q, exact := range map[float64]time.Duration{0.5: 500 * time.Millisecond, 0.99: 990 * time.Millisecond, 1: time.Second} {
		got := h.Quantile(q)
		if got < exact*3/4 || got > exact*5/4 {
			t.Errorf("Quantile(%v) = %v, want within 25%% of %v", q, got, exact)
		}
	}
	var slow LatencyHistogram
	slow.Add(2 * time.Hour) // the open last bin answers its lower bound
	if got := slow.Quantile(0.99); got != time.Duration(LatencyBinUpper[len(LatencyBinUpper)-1])*time.Microsecond {
		t.Errorf("Quantile of the open bin = %v", got)
	}
}

func TestSeriesQuery(t *testing.T) {
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	q := SeriesQuery{From: base, To: base.Add(90 * time.Second), Step: time.Minute}
	if q.Validate() != nil || q.Buckets() != 2 {
		t.Fatalf("[0, 90 s) in minutes: %v, %d buckets", q.Validate(), q.Buckets())
	}
	s := NewSeries(q)
	if len(s) != 2 || !s[1].Start.Equal(base.Add(time.Minute)) {
		t.Fatalf("NewSeries: %+v", s)
	}
	q.To = base.Add(MaxSeriesBuckets * time.Minute)
	if q.Validate() != nil {
		t.Errorf("%d buckets refused", MaxSeriesBuckets)
	}
	q.To = q.To.Add(time.Second)
	if err := q.Validate(); !errors.Is(err, ErrInvalid) {
		t.Errorf("%d buckets and a bit: %v", MaxSeriesBuckets, err)
	}
}
