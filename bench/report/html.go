package report

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// uPlot 1.6.32 (MIT, https://github.com/leeoniya/uPlot), copied from the npm
// package's dist/ directory; see assets/uPlot.LICENSE.
var (
	//go:embed assets/uPlot.iife.min.js
	uplotJS string
	//go:embed assets/uPlot.min.css
	uplotCSS string
)

// chart is one plot: aligned series over a shared x axis.
type chart struct {
	ID     string      `json:"id"`
	Title  string      `json:"title"`
	XLabel string      `json:"xlabel"`
	YLabel string      `json:"ylabel"`
	XKind  string      `json:"xkind"` // "percentile" (x = -log10(1-q)) or "seconds"
	Series []string    `json:"series"`
	Data   [][]float64 `json:"data"` // Data[0] is x, then one row per series
}

// charts builds the plots of r: per phase a percentile curve of latency
// (and of TTFT for streams) and the throughput timeline; per failover k a
// TTFT curve.
func (r *Report) charts() []chart {
	var out []chart
	for i, p := range r.Phases {
		if len(p.CDF) > 0 {
			c := chart{ID: fmt.Sprintf("cdf%d", i), Title: p.Name + ": latency by percentile (all rounds)", XLabel: "percentile", YLabel: "µs", XKind: "percentile"}
			for _, name := range sortedKeys(p.CDF) {
				pts := p.CDF[name]
				if len(c.Data) == 0 {
					xs := make([]float64, len(pts))
					for j, pt := range pts {
						xs[j] = percentileX(pt.Q)
					}
					c.Data = append(c.Data, xs)
				}
				ys := make([]float64, len(pts))
				for j, pt := range pts {
					ys[j] = pt.Us
				}
				c.Series = append(c.Series, name)
				c.Data = append(c.Data, ys)
			}
			out = append(out, c)
		}
		if len(p.Timeline) > 0 {
			c := chart{ID: fmt.Sprintf("tl%d", i), Title: p.Name + ": throughput over time (last round)", XLabel: "s", YLabel: "req/s", XKind: "seconds"}
			n := 0
			for _, v := range p.Timeline {
				n = max(n, len(v))
			}
			xs := make([]float64, n)
			for j := range xs {
				xs[j] = float64(j+1) * 0.25
			}
			c.Data = append(c.Data, xs)
			for _, name := range sortedKeys(p.Timeline) {
				ys := make([]float64, n)
				copy(ys, p.Timeline[name])
				c.Series = append(c.Series, name)
				c.Data = append(c.Data, ys)
			}
			out = append(out, c)
		}
	}
	if len(r.Failover) > 0 {
		c := chart{ID: "failover", Title: "failover: time to first content by percentile", XLabel: "percentile", YLabel: "µs", XKind: "percentile"}
		for _, f := range r.Failover {
			if len(c.Data) == 0 {
				xs := make([]float64, len(f.CDF))
				for j, pt := range f.CDF {
					xs[j] = percentileX(pt.Q)
				}
				c.Data = append(c.Data, xs)
			}
			ys := make([]float64, len(c.Data[0]))
			for j, pt := range f.CDF {
				if j < len(ys) {
					ys[j] = pt.Us
				}
			}
			c.Series = append(c.Series, fmt.Sprintf("k=%d", f.K))
			c.Data = append(c.Data, ys)
		}
		out = append(out, c)
	}
	return out
}

// percentileX maps quantile q to -log10(1-q), capped at 5 (q = 0.99999).
func percentileX(q float64) float64 {
	return math.Min(5, -math.Log10(math.Max(1-q, 1e-5)))
}

// HTML writes the report page: the text summary and the plots. It is put
// together by hand, every report value escaped with html.EscapeString and
// the chart data as JSON (which escapes <, > and &), rather than with
// html/template: executing a template makes the linker keep every exported
// method of every type in the binary, and the bench harness ships inside the
// production troupe binary (docs/architecture.md).
func (r *Report) HTML(w io.Writer) error {
	cs, err := json.Marshal(r.charts())
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	e := func(v any) string { return html.EscapeString(fmt.Sprint(v)) }
	name := e(r.Scenario.Name)
	var b strings.Builder
	b.WriteString("<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>troupe bench: " + name + "</title>\n<style>")
	b.WriteString(uplotCSS)
	b.WriteString(pageStyle)
	b.WriteString("<script>")
	b.WriteString(uplotJS)
	b.WriteString("</script></head><body>\n<h1>troupe bench: " + name + "</h1>\n")
	fmt.Fprintf(&b, "<p>%s, mode %s, target %s; %s CPUs (%s), load average at start %s; troupe %s, %s.</p>\n",
		e(r.StartedAt), e(r.Mode), e(r.Target), e(r.Machine.CPUs), e(r.Machine.CPUModel), e(r.Machine.LoadAvg), e(r.Versions.Troupe), e(r.Versions.Go))
	b.WriteString("<pre>" + html.EscapeString(r.Text()) + "</pre>\n")
	b.WriteString("<div id=\"charts\"></div>\n<p>Every figure is in report.json next to this file.</p>\n<script>\nconst charts = ")
	b.Write(cs)
	b.WriteString(";")
	b.WriteString(pageScript)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("report: html: %w", err)
	}
	return nil
}

// pageStyle follows uPlot's CSS in the page's <style>.
const pageStyle = `
body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}
pre{background:#f4f4f4;padding:1em;overflow-x:auto;font-size:13px}
.chart{margin:1.5em 0}</style>
`

// pageScript draws the charts with uPlot; it follows "const charts = …;".
const pageScript = `
for (const c of charts) {
  const div = document.createElement("div"); div.className = "chart";
  document.getElementById("charts").appendChild(div);
  const pct = c.xkind === "percentile";
  const colors = ["#1f77b4","#d62728","#2ca02c","#9467bd","#ff7f0e","#8c564b"];
  const series = [{label: c.xlabel, value: (u, v) => v == null ? "" : pct ? (100*(1-Math.pow(10,-v))).toFixed(3)+"%" : v.toFixed(2)+" s"}];
  c.series.forEach((s, i) => series.push({label: s, stroke: colors[i % colors.length], width: 2}));
  const axes = [
    {label: c.xlabel, splits: pct ? () => [0, 1, 2, 3, 4, 5] : undefined,
     values: (u, vs) => vs.map(v => pct ? (100*(1-Math.pow(10,-v))).toPrecision(6).replace(/\.?0+$/,"")+"%" : v+" s")},
    {label: c.ylabel + (pct ? " (log)" : ""), size: 80}];
  // Percentile curves span orders of magnitude: log scale, zeros (empty) left out.
  const data = pct ? c.data.map((row, i) => i === 0 ? row : row.map(v => v > 0 ? v : null)) : c.data;
  const scales = {x: {time: false}};
  if (pct) scales.y = {distr: 3};
  new uPlot({title: c.title, width: 1000, height: 320, series, axes, scales}, data, div);
}
</script></body></html>
`
