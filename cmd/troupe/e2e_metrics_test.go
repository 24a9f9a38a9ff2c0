package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/storage"
)

// scrapeFamilies serves some traffic (a failover, a stream) through a demo
// and returns what its /metrics exposes.
func scrapeFamilies(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	cfg := testConfig(t)
	cfg.Policies.Active = "round_robin" // one request starts on the failing account: a failover
	cfg.Gateway.QuotaProbe = 0
	d := startTestDemo(t, cfg, tuned([]int{2, 4}, func(ma *mock.Account, _ *storage.Account) {
		ma.Latency, ma.TokensPerSecond = 0, 0
		if ma.Name == "demo-0002" {
			ma.Fault = &mock.Fault{Kind: mock.FaultServerError}
		}
	}))
	for i, stream := range []bool{false, false, true} {
		resp, b := d.post(t, "/v1/chat/completions", fmt.Sprintf(`{"model":%q,"stream":%v,"messages":[{"role":"user","content":"hi"}]}`, demoOpenAIModel, stream))
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d: %s", i, resp.StatusCode, b)
		}
	}
	d.assertNoLeases(t)
	resp, body := d.do(t, http.MethodGet, "/metrics", nil, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: status %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return families
}

// TestMetricsFollowConventions lints /metrics with Prometheus's own linter
// (promtool check metrics): counters end in _total, units are base units
// (seconds, bytes) named in the suffix, every metric has help.
func TestMetricsFollowConventions(t *testing.T) {
	families := scrapeFamilies(t)
	var mfs []*dto.MetricFamily
	for _, mf := range families {
		mfs = append(mfs, mf)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// TestDashboardQueriesExist: every metric the Grafana dashboard
// (docs/grafana/troupe.json) queries is exposed on /metrics.
func TestDashboardQueriesExist(t *testing.T) {
	exprs := dashboardExprs(t, "../../docs/grafana/troupe.json")
	if len(exprs) < 10 {
		t.Fatalf("the dashboard has %d queries", len(exprs))
	}
	families := scrapeFamilies(t)
	names := map[string]bool{}
	for _, e := range exprs {
		for _, n := range metricNames(e) {
			names[n] = true
		}
	}
	var missing []string
	for n := range names {
		if !exposed(families, n) {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("the dashboard queries metrics /metrics does not expose: %s", strings.Join(missing, ", "))
	}
}

// dashboardExprs returns every PromQL expression of a Grafana dashboard:
// its panels' targets (rows' nested panels included) and its templating
// queries.
func dashboardExprs(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if s, ok := e.(string); ok && (k == "expr" || (k == "query" && strings.Contains(s, "("))) {
					out = append(out, s)
					continue
				}
				if q, ok := e.(map[string]any); ok && k == "query" {
					if s, ok := q["query"].(string); ok {
						out = append(out, s)
					}
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(dash)
	return out
}

// promIdent is a metric-name-shaped word of an expression.
var promIdent = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)

// metricNames returns the metric names an expression reads: its words
// that start like Troupe's, the Go runtime's or the process's metrics
// (functions, label names and keywords do not).
func metricNames(expr string) []string {
	// Label matchers and grouping clauses name labels, not metrics.
	expr = regexp.MustCompile(`\{[^}]*\}|\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`).ReplaceAllString(expr, " ")
	var out []string
	for _, w := range promIdent.FindAllString(expr, -1) {
		if strings.HasPrefix(w, "troupe_") || strings.HasPrefix(w, "go_") || strings.HasPrefix(w, "process_") {
			out = append(out, w)
		}
	}
	return out
}

// exposed reports whether /metrics has a series of name: a family of
// that name, or a histogram's _bucket, _sum or _count.
func exposed(families map[string]*dto.MetricFamily, name string) bool {
	if mf, ok := families[name]; ok && len(mf.Metric) > 0 {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if mf, ok := families[base]; ok && len(mf.Metric) > 0 &&
				(mf.GetType() == dto.MetricType_HISTOGRAM || (suffix != "_bucket" && mf.GetType() == dto.MetricType_SUMMARY)) {
				return true
			}
		}
	}
	return false
}
