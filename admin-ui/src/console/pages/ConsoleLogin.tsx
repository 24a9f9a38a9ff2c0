import { useState, type FormEvent } from 'react'
import { ApiError } from '../../api'
import { consoleApi, type Session } from '../api'
import { consoleHref, consoleNavigate } from '../router'

interface Props {
  onLogin: (s: Session) => void
  dark: boolean
  toggleTheme: () => void
}

/** loginBody sends what the user typed as an email when it has an @ (names never do), else as a name. */
export function loginBody(id: string, password: string) {
  const v = id.trim()
  return v.includes('@') ? { email: v, password } : { name: v, password }
}

/** ConsoleLogin is the users' login: name or email and password (POST /api/console/login). */
export function ConsoleLogin({ onLogin, dark, toggleTheme }: Props) {
  const [id, setId] = useState('')
  const [password, setPassword] = useState('')
  const [error, setError] = useState('')
  const [busy, setBusy] = useState(false)

  const submit = async (e: FormEvent) => {
    e.preventDefault()
    setBusy(true)
    setError('')
    try {
      onLogin(await consoleApi<Session>('POST', 'login', loginBody(id, password)))
    } catch (err) {
      setError(err instanceof ApiError ? err.message : 'The gateway could not be reached.')
    } finally {
      setBusy(false)
    }
  }
  return (
    <div className="center">
      <form className="card login" onSubmit={submit}>
        <h1>Troupe console</h1>
        <label>
          Name or email
          <input name="login" value={id} onChange={(e) => setId(e.target.value)} autoComplete="username" autoFocus />
        </label>
        <label>
          Password
          <input name="password" type="password" value={password} onChange={(e) => setPassword(e.target.value)} autoComplete="current-password" />
        </label>
        {error && (
          <div className="error" role="alert">
            {error}
          </div>
        )}
        <button type="submit" disabled={busy || !id.trim() || !password}>
          {busy ? 'Logging in…' : 'Log in'}
        </button>
        <p className="small">
          No account?{' '}
          <a
            href={consoleHref('register')}
            onClick={(e) => {
              e.preventDefault()
              consoleNavigate('register')
            }}
          >
            Register
          </a>
        </p>
        <button type="button" className="ghost" onClick={toggleTheme}>
          {dark ? '☀ Light' : '☾ Dark'}
        </button>
      </form>
    </div>
  )
}
