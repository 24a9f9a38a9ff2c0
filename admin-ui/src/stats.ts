// The attempt statistics of an account (GET /api/admin/accounts/{name}/stats,
// docs/admin-api.md#statistics) and their shaping for the account page.

import type { Series } from './chartdata'
import { ms } from './format'

export interface Quantiles {
  count: number
  p50: number
  p95: number
  p99: number
}

export interface Summary {
  window: string
  from: string
  requests: number
  succeeded: number
  success_rate: number
  errors: Record<string, number>
  statuses: Record<string, number>
  latency_ms: Quantiles
  ttft_ms: Quantiles
  tokens: { input: number; output: number; cache_read: number; cache_write: number }
}

export interface Point {
  at: string
  requests: number
  errors: number
  latency_p50_ms: number
  latency_p95_ms: number
  ttft_p95_ms: number
}

export interface AccountStats {
  id: string
  name: string
  provider: string
  window: string
  step_s: number
  windows: Summary[]
  points: Point[]
}

/** WINDOWS are the windows the server keeps, shortest first. */
export const WINDOWS = ['5m', '1h', '6h', '24h', '7d']

/**
 * STORED are the windows the server reads from storage: every instance's
 * attempts, where the others are the answering instance's own
 * (docs/admin-api.md#statistics).
 */
export const STORED = ['6h', '24h', '7d']

/**
 * charts turns a window's points into the account page's two charts:
 * requests and failed attempts per bucket, and latency p50/p95 with TTFT
 * p95 (null where a bucket had no attempts, so no line is drawn through 0).
 */
export function charts(points: Point[]): { x: number[]; counts: Series[]; latency: Series[] } {
  const x = points.map((p) => Math.floor(Date.parse(p.at) / 1000))
  const lat = (f: (p: Point) => number) => points.map((p) => (p.requests > 0 && f(p) > 0 ? f(p) : null))
  return {
    x,
    counts: [
      { label: 'requests', values: points.map((p) => p.requests) },
      { label: 'failed', values: points.map((p) => p.errors) },
    ],
    latency: [
      { label: 'latency p50', values: lat((p) => p.latency_p50_ms), summary: 'last', format: ms },
      { label: 'latency p95', values: lat((p) => p.latency_p95_ms), summary: 'last', format: ms },
      { label: 'ttft p95', values: lat((p) => p.ttft_p95_ms), summary: 'last', format: ms },
    ],
  }
}

/** counted lists a count map largest first, as "429 ×15 · 502 ×3"; "–" when empty. */
export function counted(m: Record<string, number>, skip: string[] = []): string {
  const e = Object.entries(m)
    .filter(([k]) => !skip.includes(k))
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
  return e.length ? e.map(([k, n]) => `${k} ×${n}`).join(' · ') : '–'
}
