import { afterEach, describe, expect, it, vi } from 'vitest'
import { api, ApiError, query, setCsrf, setUnauthorizedHandler } from './api'
import { problemOf } from './pages/Policies'
import { route } from './router'
import { pagesFor } from './pages/Accounts'
import { align } from './chartdata'

function answer(status: number, body: unknown) {
  return vi.fn(async () => new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } }))
}

afterEach(() => {
  vi.unstubAllGlobals()
  setCsrf('')
})

describe('api', () => {
  it('sends the CSRF token on unsafe methods only', async () => {
    const f = answer(200, { ok: true })
    vi.stubGlobal('fetch', f)
    setCsrf('tok')
    await api('GET', 'ops')
    await api('POST', 'keys', { name: 'k' })
    const calls = f.mock.calls as unknown as [string, RequestInit][]
    expect(calls[0][0]).toBe('/api/admin/ops')
    expect((calls[0][1].headers as Record<string, string>)['X-CSRF-Token']).toBeUndefined()
    expect((calls[1][1].headers as Record<string, string>)['X-CSRF-Token']).toBe('tok')
    expect(calls[1][1].body).toBe('{"name":"k"}')
    // The admin API answers a body not labelled JSON with 415.
    expect((calls[0][1].headers as Record<string, string>)['Content-Type']).toBeUndefined()
    expect((calls[1][1].headers as Record<string, string>)['Content-Type']).toBe('application/json')
  })
  it('turns error answers into ApiError with the policy line', async () => {
    vi.stubGlobal('fetch', answer(400, { error: { message: 'policy p:3: syntax error', type: 'invalid_request_error', code: 'policy_invalid', param: 'source', line: 3 } }))
    const e = await api('POST', 'policies/p/validate', { source: 'x' }).catch((e) => e)
    expect(e).toBeInstanceOf(ApiError)
    expect([e.status, e.code, e.param, e.line]).toEqual([400, 'policy_invalid', 'source', 3])
    expect(problemOf(e)).toEqual({ message: 'policy p:3: syntax error', line: 3 })
    expect(problemOf(new ApiError(404, { error: { message: 'no', code: 'not_found' } }))).toBeNull()
  })
  it('reports an ended session', async () => {
    vi.stubGlobal('fetch', answer(401, { error: { message: 'The session has ended', code: 'unauthenticated' } }))
    const ended = vi.fn()
    setUnauthorizedHandler(ended)
    await api('GET', 'accounts').catch(() => {})
    expect(ended).toHaveBeenCalledTimes(1)
    await api('POST', 'login', {}).catch(() => {})
    expect(ended).toHaveBeenCalledTimes(1) // a failed login is not an ended session
  })
  it('builds queries from set values', () => {
    expect(query({ q: 'a b', status: '', limit: 50, failed: false, x: undefined })).toBe('?q=a+b&limit=50')
    expect(query({})).toBe('')
  })
})

describe('router', () => {
  it('splits paths under /admin/', () => {
    expect(route('/admin/')).toEqual({ page: 'overview', rest: '' })
    expect(route('/admin/accounts')).toEqual({ page: 'accounts', rest: '' })
    expect(route('/admin/policies/my%20policy/')).toEqual({ page: 'policies', rest: 'my policy' })
  })
})

describe('accounts paging', () => {
  it('loads the pages the visible rows need', () => {
    expect(pagesFor(0, 30)).toEqual([0])
    expect(pagesFor(90, 130)).toEqual([0, 1])
    expect(pagesFor(9_950, 10_020)).toEqual([99, 100])
  })
})

describe('chart alignment', () => {
  it('fills every bucket, zero where there was no traffic', () => {
    const from = Date.parse('2026-12-01T00:00:00Z') / 1000
    const { x, series } = align(from, from + 4 * 3600, 3600, [
      { label: 'm', points: [{ t: '2026-12-01T01:00:00Z', v: 5 }, { t: '2026-12-01T03:00:00Z', v: 2 }] },
    ])
    expect(x).toEqual([from, from + 3600, from + 7200, from + 10800])
    expect(series[0].values).toEqual([0, 5, 0, 2])
  })
})
