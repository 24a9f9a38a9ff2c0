package harness

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/troupe-gw/troupe/bench/hist"
	"github.com/troupe-gw/troupe/bench/load"
	"github.com/troupe-gw/troupe/bench/report"
	"github.com/troupe-gw/troupe/bench/scenario"
	"github.com/troupe-gw/troupe/internal/progress"
)

// runFailover measures, for every k of the scenario, the time to first
// content of requests that meet k failing accounts before a healthy one.
//
// The method: request i of k uses a key restricted to the routing group
// scenario.FailoverGroup(k, i), which holds k accounts that answer 500 at
// once (priority 1) and one healthy account (priority 0), under the policy
// scenario.FailoverPolicyName (round_robin with priority as the first
// tie-break). The gateway tries the k failing accounts first, then the
// healthy one; every group serves one request, so cooldowns never get in
// the way. Each key is used once beforehand on GET /v1/models, so its
// lookup is cached and not part of the measurement. Requests are
// sequential. The attempts really made are confirmed from the gateway's
// troupe_upstream_attempts_total (attempts per request = k + 1); before
// each k the harness waits until troupe_inflight_requests is 0, so streams
// of earlier phases that end late (a hold's streams are released when the
// gateway next writes to their closed connection) are not counted.
func runFailover(ctx context.Context, cfg Config, s *scenario.Scenario, lines io.Writer, bar *progress.Bar) ([]report.Failover, *hist.Summary, error) {
	f := s.Failover
	var out []report.Failover
	call := load.Call{API: scenario.Chat, Stream: f.Streamed(), Model: s.Model, Timeout: 30 * time.Second}
	var direct *hist.Summary
	if cfg.Direct != nil {
		c, err := load.NewClient(*cfg.Direct, 4)
		if err != nil {
			return nil, nil, err
		}
		h := hist.New()
		for range f.Requests {
			if res := c.Do(call, time.Now()); res.Err == "" {
				h.Record(res.TTFT)
			}
		}
		sum := h.Summarize()
		direct = &sum
	}
	for _, k := range f.Ks {
		bar.Describe(fmt.Sprintf("failover k=%d", k))
		keys := cfg.FailoverKeys[k]
		if len(keys) != f.Requests {
			return out, direct, fmt.Errorf("harness: failover k=%d needs %d API keys (one per group), have %d", k, f.Requests, len(keys))
		}
		for _, key := range keys {
			if err := warmKey(ctx, cfg.Gateway.BaseURL, key); err != nil {
				return out, direct, err
			}
		}
		c, err := load.NewClient(load.Target{Name: "gateway", BaseURL: cfg.Gateway.BaseURL, Keys: keys}, 4)
		if err != nil {
			return out, direct, err
		}
		if err := waitIdle(ctx, cfg.MetricsURL, 20*time.Second); err != nil {
			return out, direct, err
		}
		before, mErr := attempts(ctx, cfg.MetricsURL)
		ttft, lat := hist.New(), hist.New()
		errs := map[string]int64{}
		for range f.Requests {
			if ctx.Err() != nil {
				return out, direct, ctx.Err()
			}
			res := c.Do(call, time.Now())
			if res.Err != "" {
				errs[res.Err]++
				continue
			}
			ttft.Record(res.TTFT)
			lat.Record(res.Latency)
		}
		fo := report.Failover{K: k, Requests: f.Requests, TTFT: ttft.Summarize(), Latency: lat.Summarize(), Errors: errs, CDF: ttft.Curve()}
		if after, err := attempts(ctx, cfg.MetricsURL); err == nil && mErr == nil {
			fo.AttemptsPerRequest = (after - before) / float64(f.Requests)
		}
		bar.Add(1)
		fmt.Fprintf(lines, "failover k=%d: %d ok, attempts/request %.2f, TTFT p50 %.0f µs p99 %.0f µs\n", k, ttft.Count(), fo.AttemptsPerRequest, fo.TTFT.P50us, fo.TTFT.P99us)
		out = append(out, fo)
	}
	return out, direct, nil
}

// warmKey sends GET /v1/models with key, so that the gateway has the key
// cached when the measured request comes.
func warmKey(ctx context.Context, base, key string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/models", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("harness: warm key: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("harness: warm key: GET /v1/models answered %d", resp.StatusCode)
	}
	return nil
}

// attempts returns the sum of troupe_upstream_attempts_total over every
// label set, read from the gateway's /metrics (Prometheus text format).
func attempts(ctx context.Context, url string) (float64, error) {
	return scrape(ctx, url, "troupe_upstream_attempts_total")
}

// waitIdle polls the gateway's troupe_inflight_requests gauge every 50 ms
// until it is 0. It gives up quietly after limit (the attempt count then
// shows the stragglers) and when there is no metrics URL; it fails only
// when ctx ends.
func waitIdle(ctx context.Context, url string, limit time.Duration) error {
	if url == "" {
		return nil
	}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if n, err := scrape(ctx, url, "troupe_inflight_requests"); err != nil || n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// scrape reads the gateway's /metrics at url and returns the sum of the
// counter or gauge name over every label set (0 when absent).
func scrape(ctx context.Context, url, name string) (float64, error) {
	if url == "" {
		return 0, fmt.Errorf("harness: no metrics URL")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("harness: metrics: %w", err)
	}
	defer resp.Body.Close()
	return sumMetric(resp.Body, name)
}

// sumMetric sums the counter or gauge named name in a Prometheus text
// exposition.
func sumMetric(r io.Reader, name string) (float64, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil && !strings.Contains(err.Error(), "EOF") {
		return 0, fmt.Errorf("harness: metrics: %w", err)
	}
	fam, ok := fams[name]
	if !ok {
		return 0, nil
	}
	var sum float64
	for _, m := range fam.GetMetric() {
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return sum, nil
}
