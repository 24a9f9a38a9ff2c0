import { afterEach, describe, expect, it, vi } from 'vitest'
import { cleanup, fireEvent, render, screen, waitFor } from '@testing-library/react'
import { ledgerProblem, limitsBody, Users } from './pages/Users'
import { priceBody, Prices } from './pages/Prices'
import { invitationState } from './pages/Registration'

// Each wait may take a while on a loaded machine; they poll the page, never sleep.
const slow = { timeout: 10_000 }

afterEach(() => {
  cleanup()
  vi.unstubAllGlobals()
})

/** stubAPI answers the admin API from routes ("METHOD path" → body, or {status, answer} for another status than 200) and records every call. */
function stubAPI(routes: Record<string, unknown>) {
  const calls: { method: string; path: string; body: any }[] = []
  vi.stubGlobal(
    'fetch',
    vi.fn(async (url: string, init: RequestInit) => {
      const path = url.replace('/api/admin/', '')
      const method = init.method ?? 'GET'
      calls.push({ method, path, body: init.body ? JSON.parse(init.body as string) : undefined })
      const key = `${method} ${path}`
      if (!(key in routes)) return new Response(JSON.stringify({ error: { message: 'no route ' + key } }), { status: 404 })
      const r = routes[key] as any
      if (r && typeof r === 'object' && 'status' in r && 'answer' in r) return new Response(JSON.stringify(r.answer), { status: r.status })
      return new Response(JSON.stringify(r), { status: 200 })
    }),
  )
  return calls
}

const alice = {
  id: 'u1',
  name: 'alice',
  email: 'alice@example.com',
  group: '',
  disabled: false,
  models: [],
  rpm: 0,
  max_concurrency: 0,
  has_password: true,
  balance: '12.500000',
  balance_micro: 12_500_000,
  created_at: '2026-12-01T00:00:00Z',
  last_login_at: null,
}

describe('Users', () => {
  it('checks a ledger entry as the server would, before sending it', () => {
    expect(ledgerProblem('topup', '', 'x')).toMatch(/Enter an amount/)
    expect(ledgerProblem('topup', '-5', 'x')).toMatch(/positive/)
    expect(ledgerProblem('topup', '0', 'x')).toMatch(/positive/)
    expect(ledgerProblem('topup', '1.1234567', 'x')).toMatch(/6 digits/)
    expect(ledgerProblem('topup', '1e3', 'x')).toMatch(/positive decimal/)
    expect(ledgerProblem('topup', '10', ' ')).toMatch(/note/)
    expect(ledgerProblem('adjustment', '-1.5', 'fix')).toBe('')
    expect(ledgerProblem('adjustment', '0.000', 'fix')).toMatch(/not 0/)
    expect(ledgerProblem('refund', '0.25', 'bad answer')).toBe('')
  })
  it('turns the limits form into a PATCH', () => {
    expect(limitsBody({ group: ' gold ', models: 'gpt-5, claude-sonnet-4,', rpm: '60', max_concurrency: '' })).toEqual({
      group: 'gold',
      models: ['gpt-5', 'claude-sonnet-4'],
      rpm: 60,
      max_concurrency: 0,
    })
    expect(limitsBody({ group: '', models: '', rpm: '1.5', max_concurrency: '' })).toMatch(/whole number/)
  })
  it('tops up with the amount as typed, a string, and shows the new balance', { timeout: 30_000 }, async () => {
    const after = { ...alice, balance: '22.500001', balance_micro: 22_500_001 }
    const calls = stubAPI({
      'GET users?offset=0&limit=100': { total: 1, pool: 1, offset: 0, limit: 100, users: [alice] },
      'GET users/u1': { user: alice, ledger: [] },
      'POST users/u1/ledger': { user: after, ledger: [{ id: 1, kind: 'topup', amount: '10.000001', amount_micro: 10_000_001, actor: 'admin:admin', note: 'invoice 7', request_id: '', created_at: '2026-12-06T08:00:00Z' }] },
    })
    render(<Users />)
    fireEvent.click(await screen.findByText('alice', {}, slow))
    expect((await screen.findByTestId('user-balance', {}, slow)).textContent).toBe('12.50')
    fireEvent.change(screen.getByPlaceholderText('12.50'), { target: { value: '10.000001' } })
    fireEvent.change(screen.getByPlaceholderText('invoice 2026-114'), { target: { value: 'invoice 7' } })
    fireEvent.click(screen.getByRole('button', { name: 'Top up' }))
    await waitFor(() => expect(screen.getByTestId('user-balance').textContent).toBe('22.500001'), slow)
    const post = calls.find((c) => c.method === 'POST')!
    expect(post.body).toEqual({ kind: 'topup', amount: '10.000001', note: 'invoice 7' })
    expect(screen.getByTestId('ledger').textContent).toContain('+10.000001')
  })
  it('sends the version it showed with a limits edit, and shows a 409 edit_conflict as the server words it', { timeout: 30_000 }, async () => {
    const read = { ...alice, version: 1796634176000 }
    const message = 'The user "alice" was changed by someone else since you read it (version 1796634176000, now 1796634177000), on this instance or another; your change was not saved. Reload it and make your change again.'
    const calls = stubAPI({
      'GET users?offset=0&limit=100': { total: 1, pool: 1, offset: 0, limit: 100, users: [read] },
      'GET users/u1': { user: read, ledger: [] },
      'PATCH users/u1': { status: 409, answer: { error: { message, type: 'invalid_request_error', code: 'edit_conflict', param: 'version' } } },
    })
    render(<Users />)
    fireEvent.click(await screen.findByText('alice', {}, slow))
    const form = await screen.findByTestId('limits-form', {}, slow)
    fireEvent.change(form.querySelector('input[name="rpm"]')!, { target: { value: '60' } })
    fireEvent.click(screen.getByRole('button', { name: 'Save' }))
    await waitFor(() => expect(form.textContent).toContain(message), slow)
    expect(form.textContent).not.toContain('version: ')
    const patch = calls.find((c) => c.method === 'PATCH')!
    expect(patch.body).toMatchObject({ rpm: 60, version: 1796634176000 })
  })
  it('pages the ledger to older rows, 50 at a time, until there are none', { timeout: 30_000 }, async () => {
    const row = (id: number) => ({ id, kind: 'topup', amount: '1.000000', amount_micro: 1_000_000, actor: 'admin:admin', note: 'row ' + id, request_id: '', created_at: '2026-12-06T08:00:00Z' })
    const span = (from: number, to: number) => Array.from({ length: from - to + 1 }, (_, i) => row(from - i))
    const calls = stubAPI({
      'GET users?offset=0&limit=100': { total: 1, pool: 1, offset: 0, limit: 100, users: [alice] },
      'GET users/u1': { user: alice, ledger: span(120, 71), next_before: 71 },
      'GET users/u1/ledger?limit=50&before=71': { ledger: span(70, 21), next_before: 21 },
      'GET users/u1/ledger?limit=50&before=21': { ledger: span(20, 1), next_before: null },
    })
    render(<Users />)
    fireEvent.click(await screen.findByText('alice', {}, slow))
    const rows = () => screen.getByTestId('ledger').querySelectorAll('tbody tr').length
    await waitFor(() => expect(rows()).toBe(50), slow)
    fireEvent.click(screen.getByTestId('ledger-older'))
    await waitFor(() => expect(rows()).toBe(100), slow)
    fireEvent.click(screen.getByTestId('ledger-older'))
    await waitFor(() => expect(rows()).toBe(120), slow)
    expect(screen.queryByTestId('ledger-older')).toBeNull()
    const notes = [...screen.getByTestId('ledger').querySelectorAll('tbody tr td:last-child')].map((td) => td.textContent)
    expect(notes[0]).toBe('row 120')
    expect(notes[119]).toBe('row 1')
    expect(calls.filter((c) => c.path.startsWith('users/u1/ledger')).map((c) => c.path)).toEqual(['users/u1/ledger?limit=50&before=71', 'users/u1/ledger?limit=50&before=21'])
  })
})

describe('Prices', () => {
  it('sends prices as the strings typed, leaving empty optional ones to the server', () => {
    expect(priceBody({ model: 'gpt-5', input: '1.25', output: '10', cached_input: '', cache_write: '' })).toEqual({ input: '1.25', output: '10' })
    expect(priceBody({ model: 'gpt-5', input: '0.1', output: '0.3', cached_input: '0.01', cache_write: '0.125' })).toEqual({
      input: '0.1',
      output: '0.3',
      cached_input: '0.01',
      cache_write: '0.125',
    })
    expect(priceBody({ model: '', input: '1', output: '1', cached_input: '', cache_write: '' })).toMatch(/model/)
    expect(priceBody({ model: 'm', input: '', output: '1', cached_input: '', cache_write: '' })).toMatch(/Input price is required/)
    expect(priceBody({ model: 'm', input: '1', output: '1.0000001', cached_input: '', cache_write: '' })).toMatch(/Output price .* 6 digits/)
    expect(priceBody({ model: 'm', input: '1', output: '2', cached_input: '-1', cache_write: '' })).toMatch(/Cached input/)
  })
  it('lists prices and group multipliers exactly', { timeout: 30_000 }, async () => {
    stubAPI({
      'GET prices': { prices: [{ model: 'gpt-5', currency: 'USD', input: '1.250000', cached_input: '0.125000', cache_write: '1.562500', output: '10.000000', updated_at: '2026-12-06T08:00:00Z' }] },
      'GET price-groups': { price_groups: [{ group: 'gold', multiplier: '0.800000' }] },
    })
    render(<Prices />)
    expect((await screen.findByTestId('price-input', {}, slow)).textContent).toBe('1.25')
    expect(screen.getByTestId('prices-table').textContent).toContain('1.5625')
    await waitFor(() => expect(screen.getByTestId('price-groups').textContent).toContain('× 0.8'), slow)
  })
})

describe('Registration', () => {
  it('names an invitation state', () => {
    const base = { id: 'i', prefix: 'inv-abcd', note: '', max_uses: 2, uses: 0, disabled: false, expires_at: null, created_by: 'admin:a', created_at: '2026-12-01T00:00:00Z' }
    const now = Date.parse('2026-12-06T00:00:00Z')
    expect(invitationState(base, now)).toBe('active')
    expect(invitationState({ ...base, uses: 2 }, now)).toBe('used')
    expect(invitationState({ ...base, expires_at: '2026-12-05T00:00:00Z' }, now)).toBe('expired')
    expect(invitationState({ ...base, disabled: true, uses: 2 }, now)).toBe('revoked')
  })
})
