// Shaping the daily spend rollups (GET /api/admin/spend) for the Spend page:
// totals per user and model, and one chart series per model or user. Costs
// are added as BigInt micro-units from the rows' decimal strings, never as
// floating-point numbers; the chart's values are whole micro-units (exact in
// a JS number below 2^53 micro-units, 9 billion in the currency).

import { align, type Series } from './chartdata'
import { fromMicro, toMicro } from './money'

/** SpendRow is one row of GET /api/admin/spend: a user's day on one model. */
export interface SpendRow {
  day: string // YYYY-MM-DD, UTC
  user_id: string
  model: string
  requests: number
  input_tokens: number
  cached_tokens: number
  output_tokens: number
  cost: string // decimal string of the currency
  cost_micro: number
}

/** SpendTotal is the sum of the rows of one user and model over the range. */
export interface SpendTotal {
  user_id: string
  model: string
  requests: number
  input_tokens: number
  cached_tokens: number
  output_tokens: number
  cost: bigint // micro-units
}

/** totals sums rows per user and model, most expensive first (then by user, model). */
export function totals(rows: SpendRow[]): SpendTotal[] {
  const m = new Map<string, SpendTotal>()
  for (const r of rows) {
    const k = r.user_id + '\u0000' + r.model
    let t = m.get(k)
    if (!t) {
      t = { user_id: r.user_id, model: r.model, requests: 0, input_tokens: 0, cached_tokens: 0, output_tokens: 0, cost: 0n }
      m.set(k, t)
    }
    t.requests += r.requests
    t.input_tokens += r.input_tokens
    t.cached_tokens += r.cached_tokens
    t.output_tokens += r.output_tokens
    t.cost += toMicro(r.cost) ?? 0n
  }
  return [...m.values()].sort((a, b) => (a.cost === b.cost ? (a.user_id + a.model < b.user_id + b.model ? -1 : 1) : a.cost > b.cost ? -1 : 1))
}

/** grandTotal is the cost of every row, in micro-units. */
export function grandTotal(rows: SpendRow[]): bigint {
  let t = 0n
  for (const r of rows) t += toMicro(r.cost) ?? 0n
  return t
}

/**
 * dailySeries is the chart of cost per UTC day from `from` to `to` (ms),
 * one series per model or per user (named by `name`), each value the day's
 * cost in micro-units; the legend shows each series' total as a decimal.
 */
export function dailySeries(rows: SpendRow[], from: number, to: number, by: 'model' | 'user', name: (userID: string) => string = (id) => id) {
  const groups = new Map<string, { t: string; v: number }[]>()
  for (const r of rows) {
    const label = by === 'model' ? r.model : name(r.user_id)
    const pts = groups.get(label) ?? []
    pts.push({ t: r.day + 'T00:00:00Z', v: r.cost_micro })
    groups.set(label, pts)
  }
  const labels = [...groups.keys()].sort()
  const out = align(from / 1000, to / 1000, 86400, labels.map((label) => ({ label, points: groups.get(label)! })))
  const series: Series[] = out.series.map((s) => ({ ...s, format: (v: number) => fromMicro(v) }))
  return { x: out.x, series }
}

/** dayRange turns two YYYY-MM-DD dates (inclusive) into the API's [from, to) in RFC 3339 and ms. */
export function dayRange(fromDay: string, toDay: string) {
  const from = Date.parse(fromDay + 'T00:00:00Z')
  const to = Date.parse(toDay + 'T00:00:00Z') + 86_400_000
  const iso = (ms: number) => new Date(ms).toISOString().replace(/\.\d+Z$/, 'Z')
  return { from, to, fromISO: iso(from), toISO: iso(to) }
}

/** isoDay is the UTC date of ms as YYYY-MM-DD. */
export function isoDay(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10)
}
