// Chart data shaping, apart from uPlot (which needs a browser to load).

export interface Series {
  label: string
  values: (number | null)[]
  /** what the legend shows without hovering: the sum over the range, or the latest value (default sum) */
  summary?: 'sum' | 'last'
  /** how a value reads in the legend (default: a plain number) */
  format?: (v: number) => string
}

/**
 * align turns per-series points into uPlot's aligned columns over every
 * bucket from `from` to `to` (unix seconds, step seconds); missing buckets are 0.
 */
export function align(from: number, to: number, step: number, series: { label: string; points: { t: string; v: number }[] }[]) {
  const x: number[] = []
  for (let t = Math.floor(from / step) * step; t < to; t += step) x.push(t)
  const index = new Map(x.map((t, i) => [t, i]))
  const out: Series[] = series.map((s) => {
    const values = new Array<number | null>(x.length).fill(0)
    for (const p of s.points) {
      const i = index.get(Math.floor(Date.parse(p.t) / 1000 / step) * step)
      if (i !== undefined) values[i] = (values[i] ?? 0) + p.v
    }
    return { label: s.label, values }
  })
  return { x, series: out }
}

// The colours of named series: the same series has the same colour on every
// chart (requests are always blue, p99 always red, a 429 class always
// orange). Other series take the palette in order of first use.
const named: Record<string, string> = {
  requests: '#2f81f7',
  failed: '#f85149',
  failovers: '#a371f7',
  'latency p50': '#3fb950',
  'latency p95': '#e3b341',
  'latency p99': '#f85149',
  'ttft p95': '#a371f7',
  'input tokens': '#2f81f7',
  'cached tokens': '#39c5cf',
  'output tokens': '#d29922',
  quota: '#db61a2',
  rate: '#d29922',
  auth: '#a371f7',
  banned: '#8b949e',
  transient: '#f85149',
  request: '#39c5cf',
  canceled: '#6e7681',
}
const palette = ['#2f81f7', '#3fb950', '#d29922', '#f85149', '#a371f7', '#db61a2', '#39c5cf', '#e3b341', '#56d364', '#8b949e', '#ff9bce', '#79c0ff']
const assigned = new Map<string, string>()

/** colorFor returns the colour of a series label, the same on every chart. */
export function colorFor(label: string): string {
  const c = named[label] ?? assigned.get(label)
  if (c) return c
  const next = palette[assigned.size % palette.length]
  assigned.set(label, next)
  return next
}

// Dash patterns by a series' place on its chart: where lines overlap (two
// series equal over a stretch) the dashes keep both visible.
const dashes: number[][] = [[], [8, 4], [2, 3], [10, 3, 2, 3], [4, 4]]

/** dashFor returns the dash pattern of the i-th series of a chart ([] is solid). */
export function dashFor(i: number): number[] {
  return dashes[i % dashes.length]
}

/** summarize returns what the legend shows of values: their sum, or the latest non-null one (null when none). */
export function summarize(values: (number | null)[], how: 'sum' | 'last' = 'sum'): number | null {
  if (how === 'last') {
    for (let i = values.length - 1; i >= 0; i--) if (values[i] !== null && values[i] !== undefined) return values[i]
    return null
  }
  return values.reduce<number>((a, v) => a + (v ?? 0), 0)
}

/** sparse reports whether fewer than half of values are set (the rest null): a line would hide them. */
export function sparse(values: (number | null)[]): boolean {
  return values.filter((v) => v !== null && v !== undefined).length * 2 < values.length
}
