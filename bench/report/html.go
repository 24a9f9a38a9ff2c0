package report

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
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

var page = template.Must(template.New("report").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>troupe bench: {{.R.Scenario.Name}}</title>
<style>{{.CSS}}
body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}
pre{background:#f4f4f4;padding:1em;overflow-x:auto;font-size:13px}
.chart{margin:1.5em 0}</style>
<script>{{.JS}}</script></head><body>
<h1>troupe bench: {{.R.Scenario.Name}}</h1>
<p>{{.R.StartedAt}}, mode {{.R.Mode}}, target {{.R.Target}}; {{.R.Machine.CPUs}} CPUs ({{.R.Machine.CPUModel}}), load average at start {{.R.Machine.LoadAvg}}; troupe {{.R.Versions.Troupe}}, {{.R.Versions.Go}}.</p>
<pre>{{.Text}}</pre>
<div id="charts"></div>
<p>Every figure is in report.json next to this file.</p>
<script>
const charts = {{.Charts}};
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
`))

// HTML writes the report page: the text summary and the plots.
func (r *Report) HTML(w io.Writer) error {
	cs, err := json.Marshal(r.charts())
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	err = page.Execute(w, struct {
		R      *Report
		CSS    template.CSS
		JS     template.JS
		Charts template.JS
		Text   string
	}{r, template.CSS(uplotCSS), template.JS(uplotJS), template.JS(cs), r.Text()})
	if err != nil {
		return fmt.Errorf("report: html: %w", err)
	}
	return nil
}
