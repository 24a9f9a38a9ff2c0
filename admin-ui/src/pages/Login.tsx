import { useState, type FormEvent } from 'react'
import { api, ApiError } from '../api'
import type { Me } from '../App'

interface Props {
  onLogin: (m: Me) => void
  dark: boolean
  toggleTheme: () => void
}

export function Login({ onLogin, dark, toggleTheme }: Props) {
  const [username, setUsername] = useState('admin')
  const [password, setPassword] = useState('')
  const [error, setError] = useState('')
  const [busy, setBusy] = useState(false)

  const submit = async (e: FormEvent) => {
    e.preventDefault()
    setBusy(true)
    setError('')
    try {
      const r = await api<{ csrf_token: string; user: { username: string } }>('POST', 'login', { username, password })
      onLogin({ auth: 'session', user: r.user, csrf_token: r.csrf_token })
    } catch (err) {
      setError(err instanceof ApiError ? err.message : 'The gateway could not be reached.')
    } finally {
      setBusy(false)
    }
  }
  return (
    <div className="center">
      <form className="card login" onSubmit={submit}>
        <h1>Troupe admin</h1>
        <label>
          Username
          <input name="username" value={username} onChange={(e) => setUsername(e.target.value)} autoComplete="username" />
        </label>
        <label>
          Password
          <input name="password" type="password" value={password} onChange={(e) => setPassword(e.target.value)} autoComplete="current-password" autoFocus />
        </label>
        {error && (
          <div className="error" role="alert">
            {error}
          </div>
        )}
        <button type="submit" disabled={busy || !password}>
          {busy ? 'Logging in…' : 'Log in'}
        </button>
        <button type="button" className="ghost" onClick={toggleTheme}>
          {dark ? '☀ Light' : '☾ Dark'}
        </button>
      </form>
    </div>
  )
}
