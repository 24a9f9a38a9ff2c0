import { useCallback, useEffect, useState } from 'react'
import { useTheme } from '../App'
import './console.css'
import { consoleApi, setCsrf, setUnauthorizedHandler, type Session } from './api'
import { consoleHref, consoleNavigate, useConsoleRoute } from './router'
import { ConsoleLogin } from './pages/ConsoleLogin'
import { Register } from './pages/Register'
import { Dashboard } from './pages/Dashboard'
import { ConsoleKeys } from './pages/ConsoleKeys'
import { Requests } from './pages/Requests'
import { Account } from './pages/Account'

const pages: [string, string][] = [
  ['dashboard', 'Dashboard'],
  ['keys', 'API keys'],
  ['requests', 'Requests'],
  ['account', 'Account'],
]

/**
 * ConsoleApp is the users' console at /console/: a visitor logs in or
 * registers; a logged-in user sees its balance and spend, manages its own
 * keys, reads its request log and changes its password. It talks to
 * /api/console/ only (./api).
 */
export function ConsoleApp() {
  const [session, setSession] = useState<Session | null | undefined>(undefined) // undefined: checking
  const [dark, toggleTheme] = useTheme()
  const page = useConsoleRoute()

  useEffect(() => {
    document.title = 'Troupe console'
  }, [])
  const start = useCallback((s: Session | null) => {
    setCsrf(s?.csrf_token ?? '')
    setSession(s)
  }, [])
  useEffect(() => {
    setUnauthorizedHandler(() => start(null))
    consoleApi<Session>('GET', 'me')
      .then(start)
      .catch(() => start(null))
  }, [start])

  if (session === undefined) return <div className="center muted">Loading…</div>
  if (session === null) {
    if (page === 'register') return <Register dark={dark} toggleTheme={toggleTheme} />
    return (
      <ConsoleLogin
        onLogin={(s) => {
          start(s)
          if (page === 'login') consoleNavigate('dashboard')
        }}
        dark={dark}
        toggleTheme={toggleTheme}
      />
    )
  }

  const logout = async () => {
    await consoleApi('POST', 'logout').catch(() => {})
    start(null)
    consoleNavigate('login')
  }
  const shown = page === 'login' || page === 'register' ? 'dashboard' : page
  return (
    <div className="shell">
      <nav className="side">
        <div className="brand">Troupe</div>
        {pages.map(([id, label]) => (
          <a
            key={id}
            href={consoleHref(id)}
            className={shown === id ? 'active' : ''}
            onClick={(e) => {
              e.preventDefault()
              consoleNavigate(id)
            }}
          >
            {label}
          </a>
        ))}
        <div className="grow" />
        <button className="ghost" onClick={toggleTheme} title="Light or dark">
          {dark ? '☀ Light' : '☾ Dark'}
        </button>
        <div className="muted small" data-testid="console-user">
          {session.user.name}
        </div>
        <button className="ghost" onClick={logout}>
          Log out
        </button>
      </nav>
      <main>
        {shown === 'dashboard' && <Dashboard dark={dark} />}
        {shown === 'keys' && <ConsoleKeys user={session.user} />}
        {shown === 'requests' && <Requests />}
        {shown === 'account' && <Account user={session.user} onSession={(s) => start(s)} />}
        {!pages.some(([id]) => id === shown) && <p>No such page.</p>}
      </main>
    </div>
  )
}
