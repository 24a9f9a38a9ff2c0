// The Overview's trend charts, shaped from GET /api/admin/ops/series.
import type { Series } from './chartdata'
import { ms } from './format'

/** SeriesAnswer is GET /api/admin/ops/series (docs/admin-api.md). */
export interface SeriesAnswer {
  window: string
  from: string
  to: string
  step_seconds: number
  error_classes: string[]
  points: {
    t: string
    requests: number
    failed: number
    failovers: number
    errors: Record<string, number>
    latency_p50_ms: number | null
    latency_p99_ms: number | null
    input_tokens: number
    cached_tokens: number
    output_tokens: number
  }[]
}

/** trendCharts shapes the series answer into the Overview's charts. */
export function trendCharts(a: SeriesAnswer) {
  const x = a.points.map((p) => Date.parse(p.t) / 1000)
  const col = (f: (p: SeriesAnswer['points'][number]) => number | null) => a.points.map(f)
  const charts: { title: string; series: Series[]; empty?: string }[] = [
    { title: 'Requests', series: [{ label: 'requests', values: col((p) => p.requests) }, { label: 'failed', values: col((p) => p.failed) }] },
    {
      title: 'Failed upstream attempts by class',
      series: (a.error_classes ?? []).map((c) => ({ label: c, values: col((p) => p.errors?.[c] ?? 0) })),
      empty: 'No upstream attempt failed in this window.',
    },
    { title: 'Failovers (extra attempts)', series: [{ label: 'failovers', values: col((p) => p.failovers) }] },
    {
      title: 'Latency',
      series: [
        { label: 'latency p50', values: col((p) => p.latency_p50_ms), summary: 'last', format: ms },
        { label: 'latency p99', values: col((p) => p.latency_p99_ms), summary: 'last', format: ms },
      ],
    },
    {
      title: 'Tokens',
      series: [
        { label: 'input tokens', values: col((p) => p.input_tokens) },
        { label: 'cached tokens', values: col((p) => p.cached_tokens) },
        { label: 'output tokens', values: col((p) => p.output_tokens) },
      ],
    },
  ]
  return { x, charts }
}
