import { afterEach, describe, expect, it } from 'vitest'
import { cleanup, fireEvent, render, screen } from '@testing-library/react'
import { charts, counted, type Summary } from './stats'
import { WindowsTable } from './WindowsTable'

afterEach(cleanup)

const summary = (window: string, requests: number, ok: number): Summary => ({
  window,
  from: '2026-12-06T01:00:00Z',
  requests,
  succeeded: ok,
  success_rate: requests ? ok / requests : 0,
  errors: requests > ok ? { rate: requests - ok - 1, transient: 1 } : {},
  statuses: requests ? { '200': ok, '429': requests - ok - 1, '0': 1 } : {},
  latency_ms: { count: requests, p50: 812.5, p95: 2496, p99: 4352 },
  ttft_ms: { count: requests, p50: 300, p95: 770, p99: 1216 },
  tokens: { input: 1_830_000, output: 24_000, cache_read: 910_000, cache_write: 0 },
})

describe('charts', () => {
  it('draws counts for every bucket and latencies only where there were attempts', () => {
    const c = charts([
      { at: '2026-12-06T01:00:00Z', requests: 4, errors: 1, latency_p50_ms: 800, latency_p95_ms: 2000, ttft_p95_ms: 500 },
      { at: '2026-12-06T01:05:00Z', requests: 0, errors: 0, latency_p50_ms: 0, latency_p95_ms: 0, ttft_p95_ms: 0 },
      { at: '2026-12-06T01:10:00Z', requests: 2, errors: 2, latency_p50_ms: 30, latency_p95_ms: 40, ttft_p95_ms: 0 },
    ])
    expect(c.x).toEqual(['2026-12-06T01:00:00Z', '2026-12-06T01:05:00Z', '2026-12-06T01:10:00Z'].map((t) => Date.parse(t) / 1000))
    expect(c.counts.map((s) => s.values)).toEqual([
      [4, 0, 2],
      [1, 0, 2],
    ])
    expect(c.latency[1].values).toEqual([2000, null, 40])
    // Failed attempts without a first byte have no TTFT: no point, not 0.
    expect(c.latency[2].values).toEqual([500, null, null])
  })
})

describe('counted', () => {
  it('lists counts largest first, leaving out the keys asked', () => {
    expect(counted({ '200': 90, '429': 7, '502': 7 })).toBe('200 ×90 · 429 ×7 · 502 ×7')
    expect(counted({ '200': 90, '429': 7 }, ['200'])).toBe('429 ×7')
    expect(counted({})).toBe('–')
  })
})

describe('WindowsTable', () => {
  it('shows every window with its success rate, errors and quantiles, and selects one on click', () => {
    let picked = ''
    render(<WindowsTable windows={[summary('5m', 0, 0), summary('1h', 1200, 1180)]} selected="1h" onSelect={(w) => (picked = w)} />)
    expect(screen.getByTestId('success-5m').textContent).toBe('–')
    expect(screen.getByTestId('success-1h').textContent).toBe('98.3%')
    const row = screen.getByTestId('window-1h')
    expect(row.className).toBe('sel')
    expect(row.textContent).toContain('rate ×19 · transient ×1')
    expect(row.textContent).toContain('813 ms · 2.5 s · 4.4 s')
    expect(row.textContent).toContain('1.8M · 24k · 910k')
    fireEvent.click(screen.getByTestId('window-5m'))
    expect(picked).toBe('5m')
  })
})
