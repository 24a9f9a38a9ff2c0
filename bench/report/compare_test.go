package report

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-gw/troupe/bench/scenario"
)

// runReport is a report of one open-loop phase with three rounds and a
// closed-loop one at gatewayRPS against 4000 req/s direct.
func runReport(name string, a50, a99, gatewayRPS float64) *Report {
	open := *phaseOf(round(1000, 5000, a50, a99), round(1010, 5300, a50, a99), round(1020, 5100, a50, a99))
	open.Name = "chat"
	closed := Phase{Name: "max", Mode: "closed", Concurrency: 8,
		Direct: &Pooled{RPS: SpreadOf([]float64{4000, 4010})}, Gateway: &Pooled{RPS: SpreadOf([]float64{gatewayRPS, gatewayRPS + 10})}}
	return &Report{Scenario: &scenario.Scenario{Name: name, Rounds: 3}, StartedAt: "2026-12-01T08:00:00Z",
		Phases: []Phase{open, closed}, Summary: Summary{ThroughputPhase: "max"}, Memory: &Memory{RSSAfterLoad: 50 << 20, RSSMax: 60 << 20}}
}

// Compare reads reports back from disk and lines them up: added latency
// with its noise, changes against the first run in percent, and "noise"
// for a change smaller than either run's floor.
func TestCompare(t *testing.T) {
	dirA, dirB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	if err := runReport("steady", 150, 100, 3000).Write(dirA); err != nil {
		t.Fatal(err)
	}
	if err := runReport("steady", 300, 250, 3300).Write(dirB); err != nil {
		t.Fatal(err)
	}
	a, err := Read(dirA) // a directory
	if err != nil {
		t.Fatal(err)
	}
	b, err := Read(filepath.Join(dirB, "report.json")) // the file
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Read(t.TempDir()); err == nil {
		t.Errorf("Read of a directory without report.json succeeded")
	}
	c := Compare([]string{"a", "b"}, []*Report{a, b})
	row := func(figure string) Row {
		for _, r := range c.Rows {
			if r.Figure == figure {
				return r
			}
		}
		t.Fatalf("no row %q in %+v", figure, c.Rows)
		return Row{}
	}
	if r := row("chat: added p50"); r.Cells[0].Text != "0.15 ms" || r.Cells[1].Text != "0.30 ms" || r.Cells[1].Change != "+100.0 %" {
		t.Errorf("added p50 row %+v", r)
	}
	// p99: a's 100 µs is noise (floor 300 µs), so is the change.
	if r := row("chat: added p99"); !r.Cells[0].Noise || r.Cells[1].Change != "noise" {
		t.Errorf("added p99 row %+v: want a noise cell and a noise change", r)
	}
	if r := row("max: gateway req/s"); r.Cells[1].Change != "+10.0 %" {
		t.Errorf("throughput row %+v", r)
	}
	for _, r := range c.Rows {
		if strings.Contains(r.Figure, "TTFT") || strings.Contains(r.Figure, "failover") {
			t.Errorf("row %q that no run measured is shown", r.Figure)
		}
	}
	text := c.Text()
	for _, want := range []string{"figure", "vs a", "chat: added p50", "+100.0 %", "noise"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	var page bytes.Buffer
	if err := c.HTML(&page); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), "<td>chat: added p50</td>") || !strings.Contains(page.String(), `class="noise"`) {
		t.Errorf("compare page lacks the rows or the noise marks:\n%s", page.String())
	}
}
