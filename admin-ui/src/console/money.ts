// Money as the console shows it. Amounts are integers of micro-units on
// the wire (`*_micro`, beside a decimal string); the UI keeps them as
// integers and turns them into text without floating-point rounding.

import type { Series } from '../chartdata'
import { align } from '../chartdata'

/**
 * money formats micro-units as a decimal with at least `min` and at most 6
 * fraction digits, no trailing zeros beyond `min`: 1_500_000 → "1.50",
 * 1_234_567 → "1.234567", -250_000 → "-0.25".
 */
export function money(micro: number, min = 2): string {
  if (!Number.isFinite(micro)) return '–'
  const neg = micro < 0
  const abs = Math.abs(Math.trunc(micro))
  const whole = Math.floor(abs / 1_000_000)
  let frac = String(abs % 1_000_000).padStart(6, '0')
  while (frac.length > min && frac.endsWith('0')) frac = frac.slice(0, -1)
  const s = whole.toLocaleString('en-US') + (frac ? '.' + frac : '')
  return (neg ? '-' : '') + s
}

/** A row of GET /api/console/spend: one model on one UTC day. */
export interface SpendRow {
  day: string // YYYY-MM-DD
  model: string
  requests: number
  input_tokens: number
  cached_tokens: number
  output_tokens: number
  cost: string
  cost_micro: number
}

/** dayRange is the UTC days [from, to) of the last `days` days, today included, as RFC 3339 times. */
export function dayRange(days: number, now = Date.now()): { from: string; to: string } {
  const today = Math.floor(now / 86_400_000) * 86_400_000
  const to = new Date(today + 86_400_000)
  const from = new Date(today - (days - 1) * 86_400_000)
  const iso = (d: Date) => d.toISOString().replace(/\.\d+Z$/, 'Z')
  return { from: iso(from), to: iso(to) }
}

/**
 * spendCharts turns daily rows into two charts' data over [from, to): spend
 * (in currency units, by model) and requests (by model), one point a day,
 * days without rows at 0. Models are ordered by spend, then name, so the
 * colours and dashes do not move between refreshes.
 */
export function spendCharts(rows: SpendRow[], from: string, to: string): { x: number[]; spend: Series[]; requests: Series[] } {
  const byModel = new Map<string, SpendRow[]>()
  const cost = new Map<string, number>()
  for (const r of rows) {
    const label = r.model || '(none)'
    byModel.set(label, [...(byModel.get(label) ?? []), r])
    cost.set(label, (cost.get(label) ?? 0) + r.cost_micro)
  }
  const models = [...byModel.keys()].sort((a, b) => cost.get(b)! - cost.get(a)! || a.localeCompare(b))
  const f = Date.parse(from) / 1000
  const t = Date.parse(to) / 1000
  const pts = (pick: (r: SpendRow) => number) =>
    models.map((m) => ({ label: m, points: byModel.get(m)!.map((r) => ({ t: r.day + 'T00:00:00Z', v: pick(r) })) }))
  const spend = align(f, t, 86400, pts((r) => r.cost_micro))
  const requests = align(f, t, 86400, pts((r) => r.requests))
  // The chart draws currency units (its axis reads 0.25, not 250000); the
  // legend turns the sum back into micro-units before formatting it, which
  // is exact below 2^53 / 10^6 units.
  const fmt = (v: number) => money(Math.round(v * 1_000_000))
  return {
    x: spend.x,
    spend: spend.series.map((s) => ({ ...s, values: s.values.map((v) => (v === null ? null : v / 1_000_000)), format: fmt })),
    requests: requests.series,
  }
}

/** totals sums rows: requests, tokens and cost in micro-units. */
export function totals(rows: SpendRow[]) {
  let requests = 0
  let cost = 0
  let tokens = 0
  for (const r of rows) {
    requests += r.requests
    cost += r.cost_micro
    tokens += r.input_tokens + r.output_tokens
  }
  return { requests, cost, tokens }
}
