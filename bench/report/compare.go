package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
)

// Read reads a report.json written by Write: path is the file, or the
// directory holding it.
func Read(path string) (*Report, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, "report.json")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("report: %s: %w", path, err)
	}
	if r.Scenario == nil {
		return nil, fmt.Errorf("report: %s is not a troupe bench report.json (no scenario)", path)
	}
	return &r, nil
}

// Cell is one run's value of one compared figure.
type Cell struct {
	// Text is the value as shown ("0.12 ms", "noise ±0.05 ms", "–" when
	// the run did not measure it).
	Text string `json:"text"`
	// Value is the number compared (µs, req/s, %, bytes…); OK is false
	// when there is none.
	Value float64 `json:"value"`
	OK    bool    `json:"ok"`
	// Noise marks a value below its noise floor, FloorUs being that floor
	// (added-latency rows only).
	Noise   bool    `json:"noise,omitempty"`
	FloorUs float64 `json:"noise_floor_us,omitempty"`
	// Change is this run against the first one: "+12.0 %", "−3.1 %",
	// "noise" when the difference is below either run's noise floor (or
	// both are noise), "" for the first run or without both values.
	Change string `json:"change,omitempty"`
}

// Row is one compared figure over the runs.
type Row struct {
	Figure string `json:"figure"`
	Cells  []Cell `json:"cells"`
}

// Comparison is a table of figures (rows) over several runs (columns),
// the first run being the reference that the others' changes are against.
type Comparison struct {
	Runs []string `json:"runs"`
	Rows []Row    `json:"rows"`
}

// Compare lines up the verdicts of reps (named by names, in the same
// order): per phase (matched by name) the added latency and TTFT at p50 and
// p99, throughput against direct and CPU per request; then memory, memory
// per open stream, failover cost per attempt and errors, under a header of
// versions and machines.
func Compare(names []string, reps []*Report) Comparison {
	c := Comparison{Runs: names}
	vs := make([]Verdict, len(reps))
	for i, r := range reps {
		vs[i] = r.Verdict()
	}
	text := func(figure string, f func(r *Report) string) {
		row := Row{Figure: figure}
		for _, r := range reps {
			row.Cells = append(row.Cells, Cell{Text: f(r)})
		}
		c.Rows = append(c.Rows, row)
	}
	text("scenario", func(r *Report) string { return r.Scenario.Name })
	text("started", func(r *Report) string { return r.StartedAt })
	text("troupe", func(r *Report) string { return r.Versions.Troupe })
	text("machine", func(r *Report) string {
		return fmt.Sprintf("%d CPUs, load %s", r.Machine.CPUs, strings.SplitN(r.Machine.LoadAvg, " ", 2)[0])
	})

	var phases []string
	seen := map[string]bool{}
	for _, v := range vs {
		for _, p := range v.Phases {
			if !seen[p.Phase] {
				seen[p.Phase] = true
				phases = append(phases, p.Phase)
			}
		}
	}
	phaseOf := func(v Verdict, name string) *PhaseVerdict {
		for i := range v.Phases {
			if v.Phases[i].Phase == name {
				return &v.Phases[i]
			}
		}
		return nil
	}
	for _, name := range phases {
		for _, fig := range []struct {
			label string
			get   func(*PhaseVerdict) *Figure
		}{
			{"added p50", func(p *PhaseVerdict) *Figure { return p.P50 }},
			{"added p99", func(p *PhaseVerdict) *Figure { return p.P99 }},
			{"added TTFT p50", func(p *PhaseVerdict) *Figure { return p.TTFTP50 }},
			{"added TTFT p99", func(p *PhaseVerdict) *Figure { return p.TTFTP99 }},
		} {
			c.addFigures(name+": "+fig.label, vs, func(v Verdict) *Figure {
				if p := phaseOf(v, name); p != nil {
					return fig.get(p)
				}
				return nil
			})
		}
		c.addNumbers(name+": gateway req/s", vs, "%.0f", func(v Verdict) (float64, bool) {
			if p := phaseOf(v, name); p != nil && p.Throughput != nil {
				return p.Throughput.GatewayRPS, true
			}
			return 0, false
		})
		c.addNumbers(name+": throughput, % of direct", vs, "%.1f %%", func(v Verdict) (float64, bool) {
			if p := phaseOf(v, name); p != nil && p.Throughput != nil {
				return 100 * p.Throughput.Ratio, true
			}
			return 0, false
		})
		c.addNumbers(name+": gateway CPU µs/request", vs, "%.0f", func(v Verdict) (float64, bool) {
			if p := phaseOf(v, name); p != nil && p.CPUusPerRequest > 0 {
				return p.CPUusPerRequest, true
			}
			return 0, false
		})
	}
	c.addNumbers("gateway RSS after load, MiB", vs, "%.1f", func(v Verdict) (float64, bool) { return mib(v.RSSAfterLoad), v.RSSAfterLoad > 0 })
	c.addNumbers("gateway RSS max, MiB", vs, "%.1f", func(v Verdict) (float64, bool) { return mib(v.RSSMax), v.RSSMax > 0 })
	c.addNumbers("memory per open stream, KiB", vs, "%.1f", func(v Verdict) (float64, bool) { return v.BytesPerStream / 1024, v.BytesPerStream > 0 })
	c.addNumbers("failover: cost per failed attempt, ms", vs, "%.3f", func(v Verdict) (float64, bool) {
		if v.Failover == nil {
			return 0, false
		}
		return v.Failover.PerAttemptUs / 1000, true
	})
	c.addNumbers("gateway errors", vs, "%.0f", func(v Verdict) (float64, bool) { return float64(v.GatewayErrors), true })
	// Rows no run measured say nothing.
	kept := c.Rows[:0]
	for _, row := range c.Rows {
		for _, cell := range row.Cells {
			if cell.OK || (cell.Text != "" && cell.Text != "–") {
				kept = append(kept, row)
				break
			}
		}
	}
	c.Rows = kept
	return c
}

// addFigures adds a row of added-latency figures; a change is "noise" when
// either run's value is noise or the difference is below the larger floor.
func (c *Comparison) addFigures(label string, vs []Verdict, get func(Verdict) *Figure) {
	row := Row{Figure: label}
	for i, v := range vs {
		f := get(v)
		cell := Cell{Text: "–"}
		if f != nil {
			cell = Cell{Text: f.Text(), Value: f.AddedUs, OK: true, Noise: f.Noise, FloorUs: f.FloorUs}
		}
		if i > 0 && cell.OK && row.Cells[0].OK {
			ref := row.Cells[0]
			if cell.Noise || ref.Noise || math.Abs(cell.Value-ref.Value) < math.Max(cell.FloorUs, ref.FloorUs) {
				cell.Change = "noise"
			} else {
				cell.Change = change(ref.Value, cell.Value)
			}
		}
		row.Cells = append(row.Cells, cell)
	}
	c.Rows = append(c.Rows, row)
}

// addNumbers adds a row of plain numbers rendered with format.
func (c *Comparison) addNumbers(label string, vs []Verdict, format string, get func(Verdict) (float64, bool)) {
	row := Row{Figure: label}
	for i, v := range vs {
		x, ok := get(v)
		cell := Cell{Text: "–"}
		if ok {
			cell = Cell{Text: fmt.Sprintf(format, x), Value: x, OK: true}
		}
		if i > 0 && ok && row.Cells[0].OK {
			cell.Change = change(row.Cells[0].Value, x)
		}
		row.Cells = append(row.Cells, cell)
	}
	c.Rows = append(c.Rows, row)
}

// change is b against a in percent ("+12.0 %", "−3.1 %", "0 %"); "" when a
// is 0.
func change(a, b float64) string {
	switch {
	case a == b:
		return "0 %"
	case a == 0:
		return ""
	}
	d := 100 * (b - a) / math.Abs(a)
	if d < 0 {
		return fmt.Sprintf("−%.1f %%", -d)
	}
	return fmt.Sprintf("+%.1f %%", d)
}

// header is the table's first line: the figure, then per run its name and,
// after the first, its change against the first.
func (c Comparison) header() []string {
	h := []string{"figure"}
	for i, name := range c.Runs {
		h = append(h, name)
		if i > 0 {
			h = append(h, "vs "+c.Runs[0])
		}
	}
	return h
}

// cells is a row's line in the order of header.
func (row Row) cells() []string {
	out := []string{row.Figure}
	for i, cell := range row.Cells {
		out = append(out, cell.Text)
		if i > 0 {
			out = append(out, orDash(cell.Change))
		}
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

// Text renders the comparison as an aligned table.
func (c Comparison) Text() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(c.header(), "\t")+"\t")
	for _, row := range c.Rows {
		fmt.Fprintln(tw, strings.Join(row.cells(), "\t")+"\t")
	}
	tw.Flush()
	b.WriteString("noise: below the noise floor (how much the direct baseline moved between a run's rounds); a change marked noise is smaller than either run's floor\n")
	return b.String()
}

// HTML writes the comparison as a page with one table (by hand, like
// Report.HTML, every value escaped).
func (c Comparison) HTML(w io.Writer) error {
	var b strings.Builder
	b.WriteString(`<!doctype html>
<html><head><meta charset="utf-8"><title>troupe bench compare</title>
<style>body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;font-size:14px}
th,td{border-bottom:1px solid #ddd;padding:.3em .8em;text-align:right;white-space:nowrap}
th:first-child,td:first-child{text-align:left}
.noise{color:#888;font-style:italic}.chg{color:#555}</style></head><body>
<h1>troupe bench compare</h1>
<table><tr>`)
	for _, h := range c.header() {
		b.WriteString("<th>" + esc(h) + "</th>")
	}
	b.WriteString("</tr>\n")
	for _, row := range c.Rows {
		b.WriteString("<tr><td>" + esc(row.Figure) + "</td>")
		for i, cell := range row.Cells {
			class := ""
			if cell.Noise {
				class = ` class="noise"`
			}
			b.WriteString("<td" + class + ">" + esc(cell.Text) + "</td>")
			if i > 0 {
				class = "chg"
				if cell.Change == "noise" {
					class += " noise"
				}
				b.WriteString(`<td class="` + class + `">` + esc(orDash(cell.Change)) + "</td>")
			}
		}
		b.WriteString("</tr>\n")
	}
	b.WriteString(`</table>
<p>Added figures are gateway − direct, the median over a run's rounds; <span class="noise">noise</span>: below the noise floor (how much the direct baseline itself moved between that run's rounds). A change marked noise is smaller than either run's floor.</p>
</body></html>
`)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("report: compare html: %w", err)
	}
	return nil
}
