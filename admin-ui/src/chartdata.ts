// Chart data shaping, apart from uPlot (which needs a browser to load).

export interface Series {
  label: string
  values: (number | null)[]
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
