// The users' console API client (docs/admin-api.md, "Users' console"):
// JSON over fetch to /api/console/, the console's own session cookie sent
// by the browser and its own CSRF token on every unsafe request. It is
// a client of its own (../api's newClient), so neither session's token
// reaches the other's routes.
import { newClient } from '../api'

const client = newClient('/api/console/', ['login', 'me', 'password'])

/** consoleApi calls the console API: path is below /api/console/. */
export const consoleApi = client.call

/** setCsrf keeps the console session's CSRF token (from login, /me or a password change). */
export const setCsrf = client.setCsrf

/** setUnauthorizedHandler is called when a console request answers 401 (the session ended). */
export const setUnauthorizedHandler = client.setUnauthorizedHandler

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
