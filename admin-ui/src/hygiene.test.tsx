import { afterEach, describe, expect, it, vi } from 'vitest'
import { cleanup, fireEvent, render, screen, waitFor } from '@testing-library/react'
import { AccountPanel, type Account } from './pages/Accounts'

afterEach(() => {
  cleanup()
  vi.unstubAllGlobals()
})

const account = (hygiene?: Account['hygiene']): Account => ({
  id: 'a1',
  name: 'oai-7',
  provider: 'openai',
  base_url: '',
  models: [],
  max_concurrency: 4,
  group: '',
  tags: [],
  priority: 0,
  disabled: !!hygiene,
  credentials: { api_key: true },
  live: {
    status: hygiene ? 'disabled' : 'active',
    inflight: 0,
    max_inflight: 4,
    cooldown_reason: '',
    cooldown_remaining_seconds: 0,
    tier: '',
    score: null,
    requests: 0,
    failures: 3,
    ewma_success: 0.5,
    ewma_latency_ms: 0,
    usage_windows: [],
  },
  hygiene,
})

describe('account hygiene in the account panel', () => {
  it('shows why the rule disabled the account and restores it in one click', async () => {
    const flagged = account({
      action: 'disable',
      kind: 'unauthorized',
      reason: 'unauthorized since 2026-12-07T10:00:00Z: the upstream refused its credentials',
      since: '2026-12-07T10:00:00Z',
      at: '2026-12-07T10:10:00Z',
    })
    const calls: string[] = []
    vi.stubGlobal(
      'fetch',
      vi.fn(async (url: string, init: { method: string }) => {
        calls.push(`${init.method} ${url}`)
        const body = init.method === 'POST' ? { restored: true, flag: flagged.hygiene } : account()
        return new Response(JSON.stringify(body), { status: 200, headers: { 'Content-Type': 'application/json' } })
      }),
    )
    const changed = vi.fn()
    render(<AccountPanel account={flagged} onClose={() => {}} onChanged={changed} />)
    expect(screen.getByTestId('hygiene-reason').textContent).toContain('Disabled at 2026-12-07T10:10:00Z: unauthorized since')
    fireEvent.click(screen.getByTestId('restore'))
    await waitFor(() => expect(changed).toHaveBeenCalled())
    expect(calls).toEqual(['POST /api/admin/accounts/a1/restore', 'GET /api/admin/accounts/a1'])
    expect(screen.queryByTestId('hygiene-reason')).toBeNull()
    expect(screen.queryByTestId('restore')).toBeNull()
  })

  it('offers no restore for an account the rule did not flag', () => {
    render(<AccountPanel account={account()} onClose={() => {}} onChanged={() => {}} />)
    expect(screen.queryByTestId('restore')).toBeNull()
  })
})
