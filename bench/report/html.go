package report

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"strings"

	"github.com/troupe-gw/troupe/bench/hist"
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
	// Until[i] is how many points of series i are drawn: a percentile
	// curve stops at the last quantile its samples resolve (1 − 1/count),
	// a timeline where its run ended.
	Until []int `json:"until"`
	// Color and Dash are each series' style, the same for a series name in
	// every chart (seriesStyle).
	Color []string `json:"color"`
	Dash  []bool   `json:"dash"`
}

// add appends series name with values ys, of which the first until are drawn.
func (c *chart) add(name string, ys []float64, until int) {
	color, dash := seriesStyle(name)
	c.Series = append(c.Series, name)
	c.Data = append(c.Data, ys)
	c.Until = append(c.Until, until)
	c.Color = append(c.Color, color)
	c.Dash = append(c.Dash, dash)
}

// trimX cuts the x axis after the last point any series draws, so that an
// axis ends where the samples do.
func (c *chart) trimX() {
	n := 0
	for _, u := range c.Until {
		n = max(n, u)
	}
	for i := range c.Data {
		if len(c.Data[i]) > n {
			c.Data[i] = c.Data[i][:n]
		}
	}
}

// Series colours: the direct baseline and the gateway keep theirs in every
// chart and table (TTFT curves are dashed in the same colour); failover
// curves take the others, by k.
const (
	colorDirect  = "#1f77b4"
	colorGateway = "#d62728"
)

var colorsK = []string{"#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"}

// seriesStyle is the colour and dash of a series name: "direct" and
// "gateway" (with " TTFT": dashed), "k=N".
func seriesStyle(name string) (color string, dash bool) {
	base, ttft := strings.CutSuffix(name, " TTFT")
	switch {
	case base == "direct":
		return colorDirect, ttft
	case base == "gateway":
		return colorGateway, ttft
	}
	var k int
	if _, err := fmt.Sscanf(name, "k=%d", &k); err == nil && k >= 0 {
		return colorsK[k%len(colorsK)], false
	}
	return "#7f7f7f", ttft
}

// resolved is how many points of a percentile curve over pts its count
// samples resolve: those at quantiles up to 1 − 1/count (100 samples tell
// p99, not p99.9).
func resolved(pts []hist.Point, count int64) int {
	if count <= 0 {
		return 0
	}
	last := 1 - 1/float64(count)
	n := 0
	for i, pt := range pts {
		if pt.Q <= last+1e-12 {
			n = i + 1
		}
	}
	return n
}

// percentileChart is a chart of latency by percentile over curves keyed by
// series name, with count giving each series' number of samples.
func percentileChart(id, title string, names []string, curves func(string) []hist.Point, count func(string) int64) chart {
	c := chart{ID: id, Title: title, XLabel: "percentile", YLabel: "ms", XKind: "percentile"}
	for _, name := range names {
		pts := curves(name)
		if len(c.Data) == 0 {
			xs := make([]float64, len(pts))
			for j, pt := range pts {
				xs[j] = percentileX(pt.Q)
			}
			c.Data = append(c.Data, xs)
		}
		ys := make([]float64, len(c.Data[0]))
		for j, pt := range pts {
			if j < len(ys) {
				ys[j] = pt.Us / 1000
			}
		}
		c.add(name, ys, min(resolved(pts, count(name)), len(ys)))
	}
	c.trimX()
	return c
}

// charts builds the plots of r: per phase a percentile curve of latency
// (and of TTFT for streams) and the throughput timeline; per failover k a
// TTFT curve.
func (r *Report) charts() []chart {
	var out []chart
	for i := range r.Phases {
		p := &r.Phases[i]
		if len(p.CDF) > 0 {
			out = append(out, percentileChart(fmt.Sprintf("cdf%d", i), p.Name+": latency by percentile (all rounds)", sortedKeys(p.CDF),
				func(name string) []hist.Point { return p.CDF[name] }, p.samples))
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
				c.add(name, ys, len(p.Timeline[name]))
			}
			out = append(out, c)
		}
	}
	if len(r.Failover) > 0 {
		byName := map[string]*Failover{}
		var names []string
		for i := range r.Failover {
			f := &r.Failover[i]
			name := fmt.Sprintf("k=%d", f.K)
			byName[name] = f
			names = append(names, name)
		}
		out = append(out, percentileChart("failover", "failover: time to first content by percentile", names,
			func(name string) []hist.Point { return byName[name].CDF },
			func(name string) int64 { return byName[name].TTFT.Count }))
	}
	return out
}

// samples is the number of samples behind p's curve of series name
// ("direct", "gateway", "direct TTFT", …): the pooled count.
func (p *Phase) samples(name string) int64 {
	base, ttft := strings.CutSuffix(name, " TTFT")
	pooled := p.Gateway
	if base == "direct" {
		pooled = p.Direct
	}
	switch {
	case pooled == nil:
		return 0
	case ttft:
		return pooled.TTFT.Count
	}
	return pooled.Latency.Count
}

// percentileX maps quantile q to -log10(1-q), capped at 5 (q = 0.99999).
func percentileX(q float64) float64 {
	return math.Min(5, -math.Log10(math.Max(1-q, 1e-5)))
}

// esc escapes a value for HTML text and attributes.
func esc(v any) string { return html.EscapeString(fmt.Sprint(v)) }

// figureCell renders an added figure as a table cell's content: the value
// in ms, or "noise" (greyed, with the floor in its title) below the noise
// floor; "–" when not measured.
func figureCell(f *Figure) string {
	if f == nil {
		return "–"
	}
	if f.Noise {
		return fmt.Sprintf(`<span class="noise" title="median %s, below the noise floor of %s (how much the direct baseline itself moved between rounds)">noise ±%s</span>`,
			esc(ms(f.AddedUs)), esc(ms(f.FloorUs)), esc(ms(f.Bound())))
	}
	return esc(ms(f.AddedUs))
}

// throughputCell renders a phase's throughput through the gateway and
// against direct ("1406 req/s, 33.1 %").
func throughputCell(t *Throughput) string {
	if t == nil {
		return "–"
	}
	s := fmt.Sprintf("%.0f req/s, %.1f %%", t.GatewayRPS, 100*t.Ratio)
	title := fmt.Sprintf("gateway %.0f req/s, direct %.0f req/s", t.GatewayRPS, t.DirectRPS)
	if t.Noise {
		return `<span class="noise" title="` + esc(title) + `: the difference is within the rounds' spread">` + esc(s) + `</span>`
	}
	return `<span title="` + esc(title) + `">` + esc(s) + `</span>`
}

// swatch is a small square of a series colour.
func swatch(color string) string {
	return `<span class="sw" style="background:` + color + `"></span>`
}

// HTML writes the report page: the verdict (Verdict) first, then the plots
// and the text summary. It is put together by hand, every report value
// escaped with html.EscapeString and the chart data as JSON (which escapes
// <, > and &), rather than with html/template: executing a template makes
// the linker keep every exported method of every type in the binary, and
// the bench harness ships inside the production troupe binary
// (docs/architecture.md).
func (r *Report) HTML(w io.Writer) error {
	cs, err := json.Marshal(r.charts())
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	v := r.Verdict()
	name := esc(r.Scenario.Name)
	var b strings.Builder
	b.WriteString("<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>troupe bench: " + name + "</title>\n<style>")
	b.WriteString(uplotCSS)
	b.WriteString(pageStyle)
	b.WriteString("<script>")
	b.WriteString(uplotJS)
	b.WriteString("</script></head><body>\n<h1>troupe bench: " + name + "</h1>\n")
	fmt.Fprintf(&b, "<p class=\"meta\">%s, mode %s, target %s; %s CPUs (%s), load average at start %s; troupe %s, %s.</p>\n",
		esc(r.StartedAt), esc(r.Mode), esc(r.Target), esc(r.Machine.CPUs), esc(r.Machine.CPUModel), esc(r.Machine.LoadAvg), esc(r.Versions.Troupe), esc(r.Versions.Go))

	b.WriteString("<h2>Verdict</h2>\n<div class=\"verdict\"><ul>")
	for _, l := range v.Lines() {
		b.WriteString("<li>" + esc(l) + "</li>")
	}
	b.WriteString("</ul></div>\n<table>\n<tr><th>phase</th><th>load</th><th>added p50</th><th>added p99</th><th>added TTFT p50</th><th>added TTFT p99</th>" +
		"<th>throughput, % of direct</th><th>CPU / request</th><th>errors</th></tr>\n")
	for _, p := range v.Phases {
		cpu := "–"
		if p.CPUusPerRequest > 0 {
			cpu = fmt.Sprintf("%.0f µs", p.CPUusPerRequest)
		}
		fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%d of %d</td></tr>\n",
			esc(p.Phase), esc(p.Load), figureCell(p.P50), figureCell(p.P99), figureCell(p.TTFTP50), figureCell(p.TTFTP99), throughputCell(p.Throughput), cpu, p.GatewayErrors, p.GatewayRequests)
	}
	fmt.Fprintf(&b, "</table>\n<p class=\"meta\">Added figures are gateway − direct at that percentile, the median over %d interleaved rounds; "+
		"CPU is the gateway process's per request; errors are the gateway's of all its requests. <span class=\"noise\">noise ±x</span>: below the noise floor — "+
		"how much the direct baseline itself moved between rounds (at least the histograms' 0.1 %% precision) — so the gateway's cost there cannot be told "+
		"from the machine's noise; hover for the measured median.</p>\n", r.Scenario.Rounds)

	b.WriteString("<h2>Charts</h2>\n<p class=\"meta\">" + swatch(colorDirect) + "direct (the mock fleet itself) and " + swatch(colorGateway) +
		"gateway keep their colours in every chart; time to first content is dashed. Percentile curves stop at the last percentile their samples resolve.</p>\n")
	b.WriteString("<div id=\"charts\"></div>\n<h2>Every figure</h2>\n<pre>" + html.EscapeString(r.Text()) + "</pre>\n")
	b.WriteString("<p>Every figure is in report.json next to this file.</p>\n<script>\nconst charts = ")
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
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
h2{margin-top:1.5em}
pre{background:#f4f4f4;padding:1em;overflow-x:auto;font-size:13px}
.chart{margin:1.5em 0}
.verdict{font-size:16px;line-height:1.5;background:#f7f9fc;border:1px solid #d8e0ea;border-radius:6px;padding:.5em 1.5em}
table{border-collapse:collapse;margin:1em 0;font-size:13px}
th,td{border-bottom:1px solid #ddd;padding:.3em .6em;text-align:right;white-space:nowrap}
th:first-child,td:first-child{text-align:left}
.noise{color:#888;font-style:italic}
.sw{display:inline-block;width:.9em;height:.9em;border-radius:2px;vertical-align:-.1em;margin-right:.3em}
.meta{color:#555;font-size:14px}</style>
`

// pageScript draws the charts with uPlot; it follows "const charts = …;".
const pageScript = `
for (const c of charts) {
  const div = document.createElement("div"); div.className = "chart";
  document.getElementById("charts").appendChild(div);
  const pct = c.xkind === "percentile";
  const pctText = v => (100*(1-Math.pow(10,-v))).toPrecision(6).replace(/\.?0+$/,"")+"%";
  const series = [{label: c.xlabel, value: (u, v) => v == null ? "" : pct ? pctText(v) : v.toFixed(2)+" s"}];
  c.series.forEach((s, i) => series.push({label: s, stroke: c.color[i], width: 2, dash: c.dash[i] ? [6, 4] : undefined,
    value: (u, v) => v == null ? "–" : pct ? v.toPrecision(3)+" ms" : v.toFixed(0)}));
  const xmax = c.data[0].length ? c.data[0][c.data[0].length-1] : 0;
  const axes = [
    {label: c.xlabel, splits: pct ? () => [0, 1, 2, 3, 4, 5].filter(v => v <= xmax + 1e-9) : undefined,
     values: (u, vs) => vs.map(v => pct ? pctText(v) : v+" s")},
    {label: c.ylabel + (pct ? " (log)" : ""), size: 80}];
  // Each series is drawn as far as its samples go (until); percentile
  // curves span orders of magnitude: log scale, zeros (empty) left out.
  const data = c.data.map((row, i) => i === 0 ? row : row.map((v, j) => j >= c.until[i-1] || (pct && !(v > 0)) ? null : v));
  const scales = {x: {time: false}};
  if (pct) scales.y = {distr: 3};
  new uPlot({title: c.title, width: 1000, height: 320, series, axes, scales}, data, div);
}
</script></body></html>
`
