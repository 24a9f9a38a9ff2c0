// The users' console API client (docs/admin-api.md, "Users' console"):
// JSON over fetch to /api/console/, the console's own session cookie sent
// by the browser and its own CSRF token on every unsafe request. It is
// apart from the admin client (../api) so neither session's token reaches
// the other's routes.
import { ApiError } from '../api'

let csrf = ''
let onUnauthorized: () => void = () => {}

/** setCsrf keeps the console session's CSRF token (from login, /me or a password change). */
export function setCsrf(token: string) {
  csrf = token
}

/** setUnauthorizedHandler is called when a request answers 401 (the session ended). */
export function setUnauthorizedHandler(fn: () => void) {
  onUnauthorized = fn
}

/** consoleApi calls the console API: path is below /api/console/. */
export async function consoleApi<T = any>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = {}
  let payload: string | undefined
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json'
    payload = JSON.stringify(body)
  }
  if (method !== 'GET' && method !== 'HEAD' && csrf) headers['X-CSRF-Token'] = csrf
  const resp = await fetch('/api/console/' + path, { method, headers, body: payload, credentials: 'same-origin' })
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
    if (resp.status === 401 && path !== 'login' && path !== 'me' && path !== 'password') onUnauthorized()
    throw new ApiError(resp.status, json)
  }
  return json as T
}

/** A console user as GET /api/console/me shows it. */
export interface ConsoleUser {
  id: string
  name: string
  email: string
  group: string
  models: string[]
  rpm: number
  created_at: string
  last_login_at: string | null
}

/** The answer of login and /me. */
export interface Session {
  user: ConsoleUser
  csrf_token: string
  expires_at: string
}
