import { useState, type FormEvent } from 'react'
import { ApiError } from '../../api'
import { ago } from '../../format'
import { consoleApi, type ConsoleUser, type Session } from '../api'

/** passwordProblem is why the form cannot be sent yet ('' when it can). */
export function passwordProblem(current: string, next: string, again: string): string {
  if (!current || !next) return ' '
  if (next.length < 12) return 'The new password needs at least 12 characters.'
  if (next === current) return 'The new password is the current one.'
  if (again !== next) return 'The new passwords differ.'
  return ''
}

/**
 * Account shows who the user is and changes its password (POST
 * /api/console/password): every other session ends, this one goes on
 * under the new session the answer brings.
 */
export function Account({ user, onSession }: { user: ConsoleUser; onSession: (s: Session) => void }) {
  const [v, setV] = useState({ current: '', next: '', again: '' })
  const [error, setError] = useState('')
  const [done, setDone] = useState(false)
  const [busy, setBusy] = useState(false)
  const problem = passwordProblem(v.current, v.next, v.again)
  const set = (k: keyof typeof v) => (e: { target: { value: string } }) => {
    setDone(false)
    setV({ ...v, [k]: e.target.value })
  }
  const submit = async (e: FormEvent) => {
    e.preventDefault()
    setBusy(true)
    setError('')
    try {
      const r = await consoleApi<{ csrf_token: string; expires_at: string }>('POST', 'password', { current_password: v.current, new_password: v.next })
      onSession({ user, csrf_token: r.csrf_token, expires_at: r.expires_at })
      setV({ current: '', next: '', again: '' })
      setDone(true)
    } catch (err) {
      setError(err instanceof ApiError ? err.message : 'The gateway could not be reached.')
    } finally {
      setBusy(false)
    }
  }
  return (
    <div>
      <div className="head">
        <h2>Account</h2>
      </div>
      <div className="grid">
        <div className="card">
          <h3>You</h3>
          <dl>
            <dt>Name</dt>
            <dd data-testid="account-name">{user.name}</dd>
            <dt>Email</dt>
            <dd>{user.email || '–'}</dd>
            <dt>Models</dt>
            <dd>{user.models.length ? user.models.join(', ') : 'every model the gateway has a price for'}</dd>
            <dt>Requests/min</dt>
            <dd>{user.rpm || 'no limit of your own'}</dd>
            <dt>Since</dt>
            <dd>{new Date(user.created_at).toLocaleDateString()}</dd>
            <dt>Last login</dt>
            <dd>{ago(user.last_login_at)}</dd>
          </dl>
        </div>
        <form className="card form" onSubmit={submit} data-testid="password-form">
          <h3>Change password</h3>
          <label>
            Current password
            <input name="current_password" type="password" value={v.current} onChange={set('current')} autoComplete="current-password" />
          </label>
          <label>
            New password (at least 12 characters; a passphrase of unrelated words)
            <input name="new_password" type="password" value={v.next} onChange={set('next')} autoComplete="new-password" />
          </label>
          <label>
            New password again
            <input name="new_password2" type="password" value={v.again} onChange={set('again')} autoComplete="new-password" />
          </label>
          {problem.trim() && <div className="muted small">{problem}</div>}
          {error && (
            <div className="error" role="alert">
              {error}
            </div>
          )}
          {done && (
            <div className="note" role="status" data-testid="password-changed">
              Password changed. Your other sessions have ended; this one goes on.
            </div>
          )}
          <button type="submit" disabled={busy || problem !== ''}>
            {busy ? 'Changing…' : 'Change password'}
          </button>
        </form>
      </div>
    </div>
  )
}
