package load

import (
	"sync"
	"time"

	"github.com/troupe-gw/troupe/bench/hist"
)

// Bin is the width of one step of a Recorder's throughput timeline.
const Bin = 250 * time.Millisecond

// Recorder collects the results of one phase against one target. It is
// safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	start   time.Time // start of the measured window
	latency *hist.Histogram
	ttft    *hist.Histogram
	service *hist.Histogram
	lag     *hist.Histogram // open loop: actual send time − intended send time
	ok      int64
	errs    map[string]int64
	bins    []int64 // successful completions per Bin since start
}

// NewRecorder returns an empty recorder whose timeline starts at start.
func NewRecorder(start time.Time) *Recorder {
	return &Recorder{start: start, latency: hist.New(), ttft: hist.New(), service: hist.New(), lag: hist.New(), errs: map[string]int64{}}
}

// Add records one result that ended at end. Failed requests are counted by
// class and kept out of the latency histograms.
func (r *Recorder) Add(res Result, end time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if res.Err != "" {
		r.errs[res.Err]++
		return
	}
	r.ok++
	r.latency.Record(res.Latency)
	r.ttft.Record(res.TTFT)
	r.service.Record(res.Service)
	if i := int(end.Sub(r.start) / Bin); i >= 0 {
		for len(r.bins) <= i {
			r.bins = append(r.bins, 0)
		}
		r.bins[i]++
	}
}

// addLag records how late a request left against its schedule.
func (r *Recorder) addLag(d time.Duration) {
	r.mu.Lock()
	r.lag.Record(max(d, 0))
	r.mu.Unlock()
}

// addErr counts one failure of class without a result.
func (r *Recorder) addErr(class string) {
	r.mu.Lock()
	r.errs[class]++
	r.mu.Unlock()
}

// Stats is what a Recorder holds once a phase is over. The histograms are
// the recorder's own: read them, do not record into them.
type Stats struct {
	Latency *hist.Histogram
	TTFT    *hist.Histogram
	// Service is latency from the actual send (see Result.Service).
	Service *hist.Histogram
	// Lag is the open-loop dispatcher's lateness (empty for other modes).
	Lag *hist.Histogram
	// OK and Errors count successful and failed requests; Errors by class.
	OK     int64
	Errors map[string]int64
	// Elapsed is the measured window.
	Elapsed time.Duration
	// Timeline is successful completions per second, per Bin.
	Timeline []float64
}

// ErrorCount is the total of s.Errors.
func (s Stats) ErrorCount() int64 {
	var n int64
	for _, v := range s.Errors {
		n += v
	}
	return n
}

// RPS is successful completions per second of the measured window.
func (s Stats) RPS() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.OK) / s.Elapsed.Seconds()
}

// Stats returns the recorder's figures for a window of length elapsed.
func (r *Recorder) Stats(elapsed time.Duration) Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	errs := make(map[string]int64, len(r.errs))
	for k, v := range r.errs {
		errs[k] = v
	}
	n := int((elapsed + Bin - 1) / Bin)
	tl := make([]float64, n)
	for i := range min(n, len(r.bins)) {
		tl[i] = float64(r.bins[i]) / Bin.Seconds()
	}
	return Stats{Latency: r.latency, TTFT: r.ttft, Service: r.service, Lag: r.lag, OK: r.ok, Errors: errs, Elapsed: elapsed, Timeline: tl}
}
