import { useEffect, useState, type FormEvent } from 'react'
import { ApiError } from '../../api'
import { consoleApi } from '../api'
import { consoleHref, consoleNavigate } from '../router'

interface Props {
  dark: boolean
  toggleTheme: () => void
}

/** registerError is what the form says of a refused registration, naming the field when the API does. */
export function registerError(e: unknown): string {
  if (!(e instanceof ApiError)) return 'The gateway could not be reached.'
  if (e.code === 'registration_closed') return 'Registration is closed: ask the operator for an account.'
  if (e.code === 'invalid_invitation') return 'Invitation code: ' + e.message
  if (e.param === 'password') return 'Password: ' + e.message
  if (e.param === 'name' || e.param === 'email') return `${e.param[0].toUpperCase() + e.param.slice(1)}: ${e.message}`
  return e.message
}

/**
 * Register is the registration page: it asks the mode first (GET
 * /api/console/register) and says plainly when registration is closed; in
 * invite mode it asks for the invitation code.
 */
export function Register({ dark, toggleTheme }: Props) {
  const [mode, setMode] = useState<string | null>(null)
  const [v, setV] = useState({ name: '', email: '', password: '', password2: '', invitation: '' })
  const [error, setError] = useState('')
  const [done, setDone] = useState('')
  const [busy, setBusy] = useState(false)
  useEffect(() => {
    consoleApi<{ mode: string }>('GET', 'register')
      .then((r) => setMode(r.mode))
      .catch(() => setMode('unknown'))
  }, [])
  const set = (k: keyof typeof v) => (e: { target: { value: string } }) => setV({ ...v, [k]: e.target.value })
  const mismatch = v.password2 !== '' && v.password !== v.password2

  const submit = async (e: FormEvent) => {
    e.preventDefault()
    setBusy(true)
    setError('')
    try {
      const body: Record<string, string> = { name: v.name.trim(), email: v.email.trim(), password: v.password }
      if (mode === 'invite') body.invitation = v.invitation.trim()
      const r = await consoleApi<{ user: { name: string } }>('POST', 'register', body)
      setDone(r.user.name)
    } catch (err) {
      setError(registerError(err))
      if (err instanceof ApiError && err.code === 'registration_closed') setMode('closed')
    } finally {
      setBusy(false)
    }
  }
  const toLogin = (e: { preventDefault: () => void }) => {
    e.preventDefault()
    consoleNavigate('login')
  }
  return (
    <div className="center">
      <form className="card login register" onSubmit={submit} data-testid="register">
        <h1>Create an account</h1>
        {mode === null && <p className="muted">Loading…</p>}
        {mode === 'closed' && (
          <p className="notice" role="status" data-testid="registration-closed">
            Registration is closed on this gateway. Ask its operator for an account.
          </p>
        )}
        {mode === 'unknown' && <div className="error">The gateway could not be reached.</div>}
        {done && (
          <p className="note" role="status" data-testid="registered">
            Account {done} created. <a href={consoleHref('login')} onClick={toLogin}>Log in</a> with it.
          </p>
        )}
        {(mode === 'open' || mode === 'invite') && !done && (
          <>
            <label>
              Name
              <input name="name" value={v.name} onChange={set('name')} autoComplete="username" autoFocus />
            </label>
            <label>
              Email (optional; you may log in with it)
              <input name="email" type="email" value={v.email} onChange={set('email')} autoComplete="email" />
            </label>
            <label>
              Password (at least 12 characters; a passphrase of unrelated words)
              <input name="password" type="password" value={v.password} onChange={set('password')} autoComplete="new-password" />
            </label>
            <label>
              Password again
              <input name="password2" type="password" value={v.password2} onChange={set('password2')} autoComplete="new-password" />
            </label>
            {mismatch && <div className="error">The passwords differ.</div>}
            {mode === 'invite' && (
              <label>
                Invitation code
                <input name="invitation" value={v.invitation} onChange={set('invitation')} autoComplete="off" />
              </label>
            )}
            {error && (
              <div className="error" role="alert">
                {error}
              </div>
            )}
            <button type="submit" disabled={busy || !v.name.trim() || !v.password || v.password !== v.password2 || (mode === 'invite' && !v.invitation.trim())}>
              {busy ? 'Creating…' : 'Create account'}
            </button>
          </>
        )}
        <p className="small">
          Have an account?{' '}
          <a href={consoleHref('login')} onClick={toLogin}>
            Log in
          </a>
        </p>
        <button type="button" className="ghost" onClick={toggleTheme}>
          {dark ? '☀ Light' : '☾ Dark'}
        </button>
      </form>
    </div>
  )
}
