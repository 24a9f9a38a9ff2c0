import { afterEach, describe, expect, it, vi } from 'vitest'
import { cleanup, fireEvent, render, screen, waitFor } from '@testing-library/react'
import { Providers, ProvidersView } from './pages/Providers'
import type { ProviderSummary, ProvidersAnswer } from './ProvidersTable'

afterEach(() => {
  cleanup()
  vi.unstubAllGlobals()
})

const row = (provider: string, requests: number, ok: number): ProviderSummary => ({
  provider,
  window: '1h',
  from: '2026-12-06T01:00:00Z',
  requests,
  succeeded: ok,
  success_rate: requests ? ok / requests : 0,
  errors: requests > ok ? { rate: requests - ok - 2, transient: 2 } : {},
  statuses: requests ? { '200': ok, '429': requests - ok - 2, '502': 1, '0': 1 } : {},
  latency_ms: { count: requests, p50: 812.5, p95: 2496, p99: 4352 },
  ttft_ms: { count: requests ? requests - 2 : 0, p50: 300, p95: 770, p99: 1216 },
  tokens: { input: 1_830_000, output: 24_000, cache_read: 910_000, cache_write: 12_000 },
})

const answer = (window: string, providers: ProviderSummary[]): ProvidersAnswer => ({
  window,
  instance: 'gw-2',
  since: new Date(Date.now() - 3 * 3600_000).toISOString(),
  providers,
})

describe('ProvidersView', () => {
  it('shows each provider over the window and names the instance that counted', () => {
    render(<ProvidersView data={answer('1h', [row('anthropic', 1200, 1180), row('openai', 40, 30), row('codex', 0, 0)])} />)
    expect(screen.getByTestId('providers-source').textContent).toContain('last 1h counted by instance gw-2, since it started 3h ago')
    const a = screen.getByTestId('provider-anthropic')
    expect(screen.getByTestId('provider-requests-anthropic').textContent).toBe('1,200')
    expect(screen.getByTestId('provider-success-anthropic').textContent).toBe('98.3%')
    expect(a.textContent).toContain('rate ×18 · transient ×2')
    expect(a.textContent).toContain('200 ×1180 · 429 ×18 · 0 ×1 · 502 ×1')
    expect(screen.getByTestId('provider-latency-anthropic').textContent).toBe('813 ms · 2.5 s · 4.4 s')
    expect(a.textContent).toContain('300 ms · 770 ms · 1.2 s') // TTFT
    expect(a.textContent).toContain('1.8M · 24k · 910k · 12k')
    // A provider failing one attempt in four is marked; one without attempts in the window shows dashes.
    expect(screen.getByTestId('provider-success-openai').className).toBe('r bad')
    expect(screen.getByTestId('provider-success-anthropic').className).toBe('r')
    expect(screen.getByTestId('provider-success-codex').textContent).toBe('–')
    expect(screen.getByTestId('provider-latency-codex').textContent).toBe('–')
  })

  it('says that a long window is every instance\'s, from storage', () => {
    render(<ProvidersView data={answer('24h', [row('openai', 40, 30)])} />)
    expect(screen.getByTestId('providers-source').textContent).toContain('last 24h of every instance, from storage')
    cleanup()
    render(<ProvidersView data={answer('7d', [])} />)
    expect(screen.getByTestId('providers-empty').textContent).toBe('No upstream attempt in the last 7d.')
  })

  it('says when the instance has seen no attempt', () => {
    render(<ProvidersView data={answer('5m', [])} />)
    expect(screen.getByTestId('providers-empty').textContent).toContain('No upstream attempt on this instance')
    expect(screen.queryByTestId('providers-table')).toBeNull()
  })
})

describe('Providers page', () => {
  it('asks for the window picked', async () => {
    const urls: string[] = []
    vi.stubGlobal(
      'fetch',
      vi.fn(async (url: string) => {
        urls.push(url)
        const w = new URL(url, 'http://x').searchParams.get('window') ?? ''
        return new Response(JSON.stringify(answer(w, [row('openai', w === '7d' ? 5000 : 40, w === '7d' ? 4990 : 30)])), {
          status: 200,
          headers: { 'Content-Type': 'application/json' },
        })
      }),
    )
    render(<Providers />)
    await waitFor(() => expect(screen.getByTestId('provider-requests-openai').textContent).toBe('40'))
    expect(screen.getByRole('tab', { name: '1h' }).getAttribute('aria-selected')).toBe('true')
    fireEvent.click(screen.getByRole('tab', { name: '7d' }))
    await waitFor(() => expect(screen.getByTestId('provider-requests-openai').textContent).toBe('5,000'))
    expect(screen.getByTestId('providers-source').textContent).toContain('last 7d')
    expect(urls).toEqual(['/api/admin/stats/providers?window=1h', '/api/admin/stats/providers?window=7d'])
  })
})
