import { afterEach, describe, expect, it, vi } from 'vitest'
import { cleanup, fireEvent, render, screen, waitFor } from '@testing-library/react'
import { ApiError } from '../api'
import { consoleApi, setCsrf, setUnauthorizedHandler } from './api'
import { consoleHref, consoleRoute } from './router'
import { dayRange, money, spendCharts, totals, type SpendRow } from './money'
import { keyBody } from './pages/ConsoleKeys'
import { loginBody, ConsoleLogin } from './pages/ConsoleLogin'
import { Register, registerError } from './pages/Register'
import { Account, passwordProblem } from './pages/Account'
import { appendPage, type ConsoleRecord } from './pages/Requests'
import { summarize } from '../chartdata'

function answer(status: number, body: unknown) {
  return vi.fn(async () => new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } }))
}
type Calls = [string, RequestInit][]

afterEach(() => {
  cleanup()
  vi.unstubAllGlobals()
  setCsrf('')
})

describe('console api', () => {
  it('calls /api/console/ with its own CSRF token on unsafe methods only', async () => {
    const f = answer(200, {})
    vi.stubGlobal('fetch', f)
    setCsrf('ctok')
    await consoleApi('GET', 'keys')
    await consoleApi('DELETE', 'keys/k1')
    const calls = f.mock.calls as unknown as Calls
    expect(calls[0][0]).toBe('/api/console/keys')
    expect((calls[0][1].headers as Record<string, string>)['X-CSRF-Token']).toBeUndefined()
    expect(calls[1][0]).toBe('/api/console/keys/k1')
    expect((calls[1][1].headers as Record<string, string>)['X-CSRF-Token']).toBe('ctok')
  })
  it('reports an ended session, not a failed login or password check', async () => {
    vi.stubGlobal('fetch', answer(401, { error: { message: 'The session has ended', code: 'unauthenticated' } }))
    const ended = vi.fn()
    setUnauthorizedHandler(ended)
    await consoleApi('GET', 'balance').catch(() => {})
    await consoleApi('POST', 'login', {}).catch(() => {})
    await consoleApi('POST', 'password', {}).catch(() => {})
    expect(ended).toHaveBeenCalledTimes(1)
  })
})

describe('console router', () => {
  it('names pages under /console/', () => {
    expect(consoleRoute('/console/')).toBe('dashboard')
    expect(consoleRoute('/console/keys')).toBe('keys')
    expect(consoleRoute('/console/requests/')).toBe('requests')
    expect(consoleHref('dashboard')).toBe('/console/')
    expect(consoleHref('register')).toBe('/console/register')
  })
})

describe('money', () => {
  it('formats micro-units exactly', () => {
    expect(money(0)).toBe('0.00')
    expect(money(1_500_000)).toBe('1.50')
    expect(money(1_234_567)).toBe('1.234567')
    expect(money(-250_000)).toBe('-0.25')
    expect(money(12_345_678_900_000)).toBe('12,345,678.90')
    expect(money(7)).toBe('0.000007')
    expect(money(10, 0)).toBe('0.00001')
    expect(money(3_000_000, 0)).toBe('3')
  })
  it('covers the last days, today included, in UTC', () => {
    const now = Date.parse('2026-12-06T07:40:00Z')
    expect(dayRange(7, now)).toEqual({ from: '2026-11-30T00:00:00Z', to: '2026-12-07T00:00:00Z' })
    expect(dayRange(1, now)).toEqual({ from: '2026-12-06T00:00:00Z', to: '2026-12-07T00:00:00Z' })
  })
  it('shapes daily rows into spend and request charts by model', () => {
    const row = (day: string, model: string, requests: number, cost: number): SpendRow => ({
      day,
      model,
      requests,
      input_tokens: 10,
      cached_tokens: 0,
      output_tokens: 5,
      cost: '',
      cost_micro: cost,
    })
    const rows = [row('2026-12-05', 'small', 30, 100_000), row('2026-12-06', 'big', 2, 2_500_000), row('2026-12-06', 'small', 1, 200_000)]
    const c = spendCharts(rows, '2026-12-04T00:00:00Z', '2026-12-07T00:00:00Z')
    expect(c.x.length).toBe(3)
    expect(c.spend.map((s) => s.label)).toEqual(['big', 'small']) // by spend
    expect(c.spend[0].values).toEqual([0, 0, 2.5]) // currency units
    expect(c.spend[1].values).toEqual([0, 0.1, 0.2])
    // The legend sums in units and formats the micro-units exactly.
    expect(c.spend[1].format!(summarize(c.spend[1].values)!)).toBe('0.30')
    expect(c.requests[1].values).toEqual([0, 30, 1])
    expect(totals(rows)).toEqual({ requests: 33, cost: 2_800_000, tokens: 45 })
    expect(spendCharts([], '2026-12-04T00:00:00Z', '2026-12-07T00:00:00Z').spend).toEqual([])
  })
})

describe('keys form', () => {
  const d = { name: ' ci ', models: 'a, b', rpm: '', rpd: '', tokens_per_day: '', expires_in: '' }
  it('sends only what was set', () => {
    expect(keyBody({ ...d, models: '' })).toEqual({ body: { name: 'ci' } })
    expect(keyBody({ ...d, rpm: '60', expires_in: '30' })).toEqual({
      body: { name: 'ci', models: ['a', 'b'], limits: { rpm: 60, rpd: 0, tokens_per_day: 0 }, expires_in: '720h' },
    })
  })
  it('refuses what the API would', () => {
    expect(keyBody({ ...d, name: '  ' })).toEqual({ error: 'A key needs a name.' })
    expect('error' in keyBody({ ...d, rpm: '-1' })).toBe(true)
    expect('error' in keyBody({ ...d, tokens_per_day: '1.5' })).toBe(true)
    expect('error' in keyBody({ ...d, expires_in: '0' })).toBe(true)
  })
})

describe('requests', () => {
  it('appends a page without repeating rows', () => {
    const r = (id: string) => ({ request_id: id }) as ConsoleRecord
    expect(appendPage([r('a'), r('b')], [r('b'), r('c')]).map((x) => x.request_id)).toEqual(['a', 'b', 'c'])
  })
})

describe('login', () => {
  it('sends an email as email and a name as name', () => {
    expect(loginBody(' ann@example.com ', 'p')).toEqual({ email: 'ann@example.com', password: 'p' })
    expect(loginBody('ann', 'p')).toEqual({ name: 'ann', password: 'p' })
  })
  it('logs in and hands over the session', async () => {
    const s = { user: { name: 'ann' }, csrf_token: 'c', expires_at: '' }
    const f = answer(200, s)
    vi.stubGlobal('fetch', f)
    const onLogin = vi.fn()
    render(<ConsoleLogin onLogin={onLogin} dark={false} toggleTheme={() => {}} />)
    fireEvent.change(screen.getByLabelText('Name or email'), { target: { value: 'ann' } })
    fireEvent.change(screen.getByLabelText('Password'), { target: { value: 'pw' } })
    fireEvent.click(screen.getByRole('button', { name: 'Log in' }))
    await waitFor(() => expect(onLogin).toHaveBeenCalledWith(s))
    expect((f.mock.calls as unknown as Calls)[0][0]).toBe('/api/console/login')
  })
})

describe('register', () => {
  it('words refusals by field', () => {
    expect(registerError(new ApiError(403, { error: { code: 'registration_closed', message: 'x' } }))).toMatch(/closed/)
    expect(registerError(new ApiError(400, { error: { param: 'password', message: 'too easy' } }))).toBe('Password: too easy')
    expect(registerError(new ApiError(400, { error: { param: 'email', message: 'bad' } }))).toBe('Email: bad')
  })
  it('says plainly when registration is closed, and asks nothing', async () => {
    vi.stubGlobal('fetch', answer(200, { mode: 'closed' }))
    render(<Register dark={false} toggleTheme={() => {}} />)
    expect((await screen.findByTestId('registration-closed')).textContent).toMatch(/Registration is closed/)
    expect(screen.queryByLabelText('Password again')).toBeNull()
  })
  it('asks for the invitation code in invite mode and sends it', async () => {
    const f = vi.fn(async (_url: string, init?: RequestInit) =>
      init?.method === 'POST' ? new Response(JSON.stringify({ user: { name: 'ann' } }), { status: 201 }) : new Response(JSON.stringify({ mode: 'invite' }), { status: 200 }),
    )
    vi.stubGlobal('fetch', f)
    render(<Register dark={false} toggleTheme={() => {}} />)
    const code = await screen.findByLabelText('Invitation code')
    fireEvent.change(screen.getByLabelText('Name'), { target: { value: 'ann' } })
    fireEvent.change(screen.getByLabelText(/^Password \(/), { target: { value: 'violet staple orbit canyon' } })
    fireEvent.change(screen.getByLabelText('Password again'), { target: { value: 'violet staple orbit canyon' } })
    const submit = screen.getByRole('button', { name: 'Create account' }) as HTMLButtonElement
    expect(submit.disabled).toBe(true) // no code yet
    fireEvent.change(code, { target: { value: 'inv-123' } })
    fireEvent.click(submit)
    expect((await screen.findByTestId('registered')).textContent).toMatch(/Account ann created/)
    const post = (f.mock.calls as unknown as Calls).find((c) => c[1]?.method === 'POST')!
    expect(JSON.parse(post[1].body as string)).toEqual({ name: 'ann', email: '', password: 'violet staple orbit canyon', invitation: 'inv-123' })
  })
})

describe('password change', () => {
  it('checks the form before sending', () => {
    expect(passwordProblem('', '', '')).toBe(' ')
    expect(passwordProblem('old', 'short', 'short')).toMatch(/12 characters/)
    expect(passwordProblem('same password here', 'same password here', 'same password here')).toMatch(/current one/)
    expect(passwordProblem('old', 'a new long password', 'a new long passw0rd')).toMatch(/differ/)
    expect(passwordProblem('old', 'a new long password', 'a new long password')).toBe('')
  })
  it('sends current and new, and takes the new session', async () => {
    const f = answer(200, { changed: true, csrf_token: 'new-csrf', expires_at: 'e' })
    vi.stubGlobal('fetch', f)
    setCsrf('old-csrf')
    const onSession = vi.fn()
    const user = { id: 'u1', name: 'ann', email: '', group: '', models: [], rpm: 0, created_at: '2026-12-01T00:00:00Z', last_login_at: null }
    render(<Account user={user} onSession={onSession} />)
    fireEvent.change(screen.getByLabelText('Current password'), { target: { value: 'old password 1' } })
    fireEvent.change(screen.getByLabelText(/^New password \(/), { target: { value: 'amber lantern quietly folds' } })
    fireEvent.change(screen.getByLabelText('New password again'), { target: { value: 'amber lantern quietly folds' } })
    fireEvent.click(screen.getByRole('button', { name: 'Change password' }))
    await screen.findByTestId('password-changed')
    expect(onSession).toHaveBeenCalledWith({ user, csrf_token: 'new-csrf', expires_at: 'e' })
    const [url, init] = (f.mock.calls as unknown as Calls)[0]
    expect(url).toBe('/api/console/password')
    expect((init.headers as Record<string, string>)['X-CSRF-Token']).toBe('old-csrf')
    expect(JSON.parse(init.body as string)).toEqual({ current_password: 'old password 1', new_password: 'amber lantern quietly folds' })
  })
})
