import { describe, expect, it } from 'vitest'
import { align, colorFor, dashFor, sparse, summarize } from './chartdata'
import { trendCharts, type SeriesAnswer } from './trends'
import { windowsText } from './pages/Accounts'

describe('series stay distinguishable', () => {
  it('gives a series the same colour on every chart', () => {
    expect(colorFor('requests')).toBe(colorFor('requests'))
    expect(colorFor('gpt-4.1-mini')).toBe(colorFor('gpt-4.1-mini'))
    expect(colorFor('latency p50')).not.toBe(colorFor('latency p99'))
  })
  it('gives the series of one chart different colours and dashes', () => {
    const labels = ['model-a', 'model-b', 'model-c', 'model-d', 'model-e']
    expect(new Set(labels.map(colorFor)).size).toBe(labels.length)
    expect(new Set(labels.map((_, i) => dashFor(i).join(','))).size).toBe(labels.length)
    expect(dashFor(0)).toEqual([]) // the first is solid
  })
  it('sums a series, or takes its latest value, for the legend', () => {
    expect(summarize([1, null, 2, 0])).toBe(3)
    expect(summarize([120, 80, null], 'last')).toBe(80)
    expect(summarize([null, null], 'last')).toBeNull()
  })
  it('marks a mostly empty series sparse, so its points are drawn', () => {
    expect(sparse([null, null, 120, null])).toBe(true)
    expect(sparse([1, 0, 2, null])).toBe(false)
  })
  it('aligns points on buckets, zero where there are none', () => {
    const { x, series } = align(0, 180, 60, [{ label: 'a', points: [{ t: new Date(60_000).toISOString(), v: 5 }] }])
    expect(x).toEqual([0, 60, 120])
    expect(series[0].values).toEqual([0, 5, 0])
  })
})

describe('trendCharts', () => {
  const a: SeriesAnswer = {
    window: '1h',
    from: '2026-12-01T10:00:00Z',
    to: '2026-12-01T10:02:00Z',
    step_seconds: 60,
    error_classes: ['rate', 'transient'],
    points: [
      { t: '2026-12-01T10:00:00Z', requests: 4, failed: 1, failovers: 2, errors: { rate: 1, transient: 1 }, latency_p50_ms: 210, latency_p99_ms: 400, input_tokens: 40, cached_tokens: 0, output_tokens: 20 },
      { t: '2026-12-01T10:01:00Z', requests: 0, failed: 0, failovers: 0, errors: { rate: 0, transient: 0 }, latency_p50_ms: null, latency_p99_ms: null, input_tokens: 0, cached_tokens: 0, output_tokens: 0 },
    ],
  }
  it('makes the five charts of the Overview', () => {
    const { x, charts } = trendCharts(a)
    expect(x).toEqual([Date.parse(a.points[0].t) / 1000, Date.parse(a.points[1].t) / 1000])
    expect(charts.map((c) => c.title)).toEqual(['Requests', 'Failed upstream attempts by class', 'Failovers (extra attempts)', 'Latency', 'Tokens'])
    expect(charts[0].series.map((s) => [s.label, summarize(s.values, s.summary)])).toEqual([
      ['requests', 4],
      ['failed', 1],
    ])
    expect(charts[1].series.map((s) => s.label)).toEqual(['rate', 'transient'])
    // Latency: no line through empty buckets, and the legend shows the latest value.
    expect(charts[3].series[1].values).toEqual([400, null])
    expect(summarize(charts[3].series[1].values, charts[3].series[1].summary)).toBe(400)
  })
  it('has no error series when nothing failed', () => {
    expect(trendCharts({ ...a, error_classes: [] }).charts[1].series).toEqual([])
  })
})

describe('windowsText', () => {
  it('lists every usage window in full', () => {
    expect(windowsText({ live: { usage_windows: [{ name: '5h', used_percent: 40.4 }, { name: '7d', used_percent: 12 }] } as never })).toBe('5h 40% · 7d 12%')
    const fam = [{ id: 'f1', limit_name: 'premium', cooling_until: '2026-12-06T10:00:00Z' }, { id: 'f2', limit_name: '', cooling_until: null }]
    expect(windowsText({ live: { usage_windows: [{ name: '5h', used_percent: 100 }], limit_families: fam } as never })).toBe('5h 100% · premium used up')
  })
})
