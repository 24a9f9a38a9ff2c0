// The admin API client: JSON over fetch, the session cookie sent by the
// browser, the CSRF token on every unsafe request (docs/admin-api.md).

export class ApiError extends Error {
  status: number
  code: string
  param: string
  line: number // policy errors: the Lua line, 0 when unknown
  body: any
  constructor(status: number, body: any) {
    const e = body && typeof body === 'object' ? body.error ?? {} : {}
    super(typeof e.message === 'string' ? e.message : `HTTP ${status}`)
    this.status = status
    this.code = e.code ?? ''
    this.param = e.param ?? ''
    this.line = typeof e.line === 'number' ? e.line : 0
    this.body = body
  }
}

let csrf = ''
let onUnauthorized: () => void = () => {}

/** setCsrf keeps the session's CSRF token (from login or /me). */
export function setCsrf(token: string) {
  csrf = token
}

/** setUnauthorizedHandler is called when a request answers 401 (the session ended). */
export function setUnauthorizedHandler(fn: () => void) {
  onUnauthorized = fn
}

/** api calls the admin API: path is below /api/admin/. */
export async function api<T = any>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = {}
  let payload: string | undefined
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json'
    payload = typeof body === 'string' ? body : JSON.stringify(body)
  }
  if (method !== 'GET' && method !== 'HEAD' && csrf) headers['X-CSRF-Token'] = csrf
  const resp = await fetch('/api/admin/' + path, { method, headers, body: payload, credentials: 'same-origin' })
  const text = await resp.text()
  let json: any = null
  if (text) {
    try {
      json = JSON.parse(text)
    } catch {
      json = null
    }
  }
  if (!resp.ok) {
    if (resp.status === 401 && path !== 'login' && path !== 'me') onUnauthorized()
    throw new ApiError(resp.status, json)
  }
  return json as T
}

/** query builds a query string from the set (non-empty) values. */
export function query(params: Record<string, string | number | boolean | undefined | null>): string {
  const q = new URLSearchParams()
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null || v === '' || v === false) continue
    q.set(k, String(v))
  }
  const s = q.toString()
  return s ? '?' + s : ''
}
