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

/** A JSON API client bound to one base path, with its own session's CSRF token. */
export interface Client {
  /** call sends method to base + path; a string body is sent as is, another is JSON-encoded. */
  call<T = any>(method: string, path: string, body?: unknown): Promise<T>
  /** setCsrf keeps the session's CSRF token (from login, /me or a password change). */
  setCsrf(token: string): void
  /** setUnauthorizedHandler is called when a request answers 401 (the session ended). */
  setUnauthorizedHandler(fn: () => void): void
}

/**
 * newClient makes the client of one API: base is its path prefix (ending
 * in "/"); a 401 from a path in sessionPaths (login, /me: where 401 is an
 * answer, not a lost session) does not call the unauthorized handler. Each
 * client keeps its own token, so neither session's token reaches the
 * other's routes.
 */
export function newClient(base: string, sessionPaths: string[]): Client {
  let csrf = ''
  let onUnauthorized: () => void = () => {}
  async function call<T = any>(method: string, path: string, body?: unknown): Promise<T> {
    const headers: Record<string, string> = {}
    let payload: string | undefined
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json'
      payload = typeof body === 'string' ? body : JSON.stringify(body)
    }
    if (method !== 'GET' && method !== 'HEAD' && csrf) headers['X-CSRF-Token'] = csrf
    const resp = await fetch(base + path, { method, headers, body: payload, credentials: 'same-origin' })
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
      if (resp.status === 401 && !sessionPaths.includes(path)) onUnauthorized()
      throw new ApiError(resp.status, json)
    }
    return json as T
  }
  return {
    call,
    setCsrf: (token) => {
      csrf = token
    },
    setUnauthorizedHandler: (fn) => {
      onUnauthorized = fn
    },
  }
}

const admin = newClient('/api/admin/', ['login', 'me'])

/** api calls the admin API: path is below /api/admin/. */
export const api = admin.call

/** setCsrf keeps the admin session's CSRF token (from login or /me). */
export const setCsrf = admin.setCsrf

/** setUnauthorizedHandler is called when an admin request answers 401 (the session ended). */
export const setUnauthorizedHandler = admin.setUnauthorizedHandler

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

/**
 * editConflictText is the message shown when an edit is refused with 409
 * edit_conflict (the record changed since it was read: another admin,
 * instance, or the gateway itself): the server's message, which names the
 * record and says to reload, or a plain one when it has none. "" for any
 * other error.
 */
export function editConflictText(e: unknown): string {
  if (!(e instanceof ApiError) || e.status !== 409 || e.code !== 'edit_conflict') return ''
  const plain = 'Changed by someone else since you read it; your change was not saved. Reload and make your change again.'
  return e.message && !e.message.startsWith('HTTP ') ? e.message : plain
}
