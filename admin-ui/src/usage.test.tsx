import { afterEach, describe, expect, it, vi } from 'vitest'
import { cleanup, render, screen, waitFor } from '@testing-library/react'
import { RequestLog } from './pages/Usage'

// uPlot reads window.matchMedia when it loads, which jsdom lacks; the log draws no chart.
vi.mock('./Chart', () => ({ Chart: () => null }))

// Each wait may take a while on a loaded machine; they poll the page, never sleep.
const slow = { timeout: 10_000 }

afterEach(() => {
  cleanup()
  vi.unstubAllGlobals()
})

const rec = (id: string, cost_micro: number) => ({
  request_id: id,
  at: '2026-12-07T02:00:00Z',
  key_id: 'k1',
  key: 'ops',
  account_id: 'a1',
  account: 'acct-1',
  model: 'gpt-4.1-mini',
  route: 'chat.completions',
  stream: false,
  status: 200,
  error_class: '',
  attempts: 1,
  latency_ms: 12.5,
  ttft_ms: 0,
  input_tokens: 10,
  cached_tokens: 0,
  output_tokens: 5,
  reasoning_tokens: 0,
  estimated: false,
  cost: (cost_micro / 1e6).toFixed(6), // the server's decimal string (not what the page shows)
  cost_micro,
})

describe('RequestLog', () => {
  it("shows each request's cost from its micro-units, exactly", async () => {
    vi.stubGlobal(
      'fetch',
      vi.fn(async (url: string) => {
        expect(url).toMatch(/^\/api\/admin\/usage\/requests\?/)
        return new Response(JSON.stringify({ records: [rec('r1', 1_234_567), rec('r2', 0), rec('r3', 9_007_199_254_740)], next_cursor: null }), { status: 200 })
      }),
    )
    render(<RequestLog />)
    await waitFor(() => expect(screen.getAllByTestId('cost')).toHaveLength(3), slow)
    expect(screen.getAllByTestId('cost').map((c) => c.textContent)).toEqual(['1.234567', '0.00', '9007199.25474'])
  })
})
