package report

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-gw/troupe/bench/hist"
	"github.com/troupe-gw/troupe/bench/scenario"
)

func TestSpreadOf(t *testing.T) {
	if s := SpreadOf([]float64{3, 1, 2}); s.Median != 2 || s.Min != 1 || s.Max != 3 {
		t.Fatalf("odd: %+v", s)
	}
	if s := SpreadOf([]float64{4, 1, 3, 2}); s.Median != 2.5 || s.Values[0] != 4 {
		t.Fatalf("even: %+v (values keep their order)", s)
	}
	if s := SpreadOf(nil); s.Median != 0 || s.Values != nil {
		t.Fatalf("empty: %+v", s)
	}
}

func TestWrite(t *testing.T) {
	h := hist.New()
	h.Record(1000)
	r := &Report{
		Scenario: &scenario.Scenario{Name: "t"},
		Summary:  Summary{AddedP50us: 12.5, AddedP99us: 40, GatewayRPS: 900, DirectRPS: 1000},
		Phases: []Phase{{Name: "p", CDF: map[string][]hist.Point{"direct": h.Curve(), "gateway": h.Curve()},
			Timeline: map[string][]float64{"direct": {1, 2}, "gateway": {1}},
			Direct:   &Pooled{}, Gateway: &Pooled{}, Added: map[string]Spread{"p99_us": SpreadOf([]float64{40})}}},
		Failover: []Failover{{K: 1, CDF: h.Curve()}},
	}
	dir := t.TempDir()
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Summary map[string]any `json:"summary"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"added_p50_us", "added_p99_us", "gateway_rps", "direct_rps"} {
		if _, ok := got.Summary[k].(float64); !ok {
			t.Errorf("summary.%s is %T, want a number", k, got.Summary[k])
		}
	}
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"uPlot", `"id":"cdf0"`, `"id":"tl0"`, `"id":"failover"`, "added by the gateway"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	if c := r.charts(); len(c) != 3 || len(c[0].Data) != 3 || len(c[1].Data[0]) != 2 {
		t.Fatalf("charts %+v", c)
	}
}
