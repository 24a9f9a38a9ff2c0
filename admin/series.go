package admin

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/valyala/fasthttp"
)

// seriesWindows are the windows of GET /api/admin/ops/series and the step
// of each: about 60 to 100 points a chart.
var seriesWindows = map[string]time.Duration{"1h": time.Minute, "6h": 5 * time.Minute, "24h": 15 * time.Minute, "7d": 2 * time.Hour}

// seriesPoint is one bucket of the Overview's trend charts.
type seriesPoint struct {
	T            string           `json:"t"` // bucket start, RFC 3339
	Requests     int64            `json:"requests"`
	Failed       int64            `json:"failed"`    // requests answered with status >= 400
	Failovers    int64            `json:"failovers"` // extra upstream attempts
	Errors       map[string]int64 `json:"errors"`    // failed upstream attempts by class (every class of the window, 0 included)
	LatencyP50   *float64         `json:"latency_p50_ms"`
	LatencyP99   *float64         `json:"latency_p99_ms"` // null: no request in the bucket
	InputTokens  int64            `json:"input_tokens"`
	CachedTokens int64            `json:"cached_tokens"`
	OutputTokens int64            `json:"output_tokens"`
}

// seriesAnswer is the answer of GET /api/admin/ops/series.
type seriesAnswer struct {
	Window       string        `json:"window"`
	From         string        `json:"from"`
	To           string        `json:"to"`
	StepSeconds  int           `json:"step_seconds"`
	ErrorClasses []string      `json:"error_classes"` // the classes of Errors, sorted
	Points       []seriesPoint `json:"points"`
}

// opsSeries serves GET /api/admin/ops/series?window=1h|6h|24h|7d (default
// 1h): the request log of the window up to now in buckets
// (storage.RequestLog.UsageSeries), for the Overview's trend charts.
func (s *Server) opsSeries(ctx *fasthttp.RequestCtx) {
	window := string(ctx.QueryArgs().Peek("window"))
	if window == "" {
		window = "1h"
	}
	step, ok := seriesWindows[window]
	if !ok {
		writeError(ctx, errBadParam("window", "window is 1h, 6h, 24h or 7d."))
		return
	}
	span, _ := time.ParseDuration(window)
	if window == "7d" {
		span = 7 * 24 * time.Hour
	}
	to := s.now().UTC().Truncate(step).Add(step) // the current bucket included
	q := storage.SeriesQuery{From: to.Add(-span), To: to, Step: step}
	rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	buckets, err := s.store.UsageSeries(rctx, q)
	if err != nil {
		if errors.Is(err, storage.ErrInvalid) {
			writeError(ctx, errBadParam("window", err.Error()))
			return
		}
		s.storageError(ctx, err)
		return
	}
	writeJSON(ctx, 200, seriesOf(window, q, buckets))
}

// seriesOf turns buckets into the answer: latency quantiles in
// milliseconds, and every error class of the window in every point.
func seriesOf(window string, q storage.SeriesQuery, buckets []storage.SeriesBucket) seriesAnswer {
	classes := map[string]bool{}
	for _, b := range buckets {
		for c := range b.Errors {
			classes[c] = true
		}
	}
	ans := seriesAnswer{Window: window, From: q.From.Format(time.RFC3339), To: q.To.Format(time.RFC3339), StepSeconds: int(q.Step / time.Second),
		ErrorClasses: append([]string{}, slices.Sorted(maps.Keys(classes))...), Points: make([]seriesPoint, len(buckets))}
	quantile := func(b *storage.SeriesBucket, p float64) *float64 {
		if b.Latency.Count() == 0 {
			return nil
		}
		v := float64(b.Latency.Quantile(p).Microseconds()) / 1000
		return &v
	}
	for i := range buckets {
		b := &buckets[i]
		errs := make(map[string]int64, len(classes))
		for c := range classes {
			errs[c] = b.Errors[c]
		}
		ans.Points[i] = seriesPoint{T: b.Start.Format(time.RFC3339), Requests: b.Requests, Failed: b.Failed, Failovers: b.Failovers, Errors: errs,
			LatencyP50: quantile(b, 0.5), LatencyP99: quantile(b, 0.99), InputTokens: b.InputTokens, CachedTokens: b.CachedTokens, OutputTokens: b.OutputTokens}
	}
	return ans
}
