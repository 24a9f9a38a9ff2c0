import { useCallback, useEffect, useState } from 'react'
import { api, setCsrf, setUnauthorizedHandler } from './api'
import { navigate, useRoute } from './router'
import { Login } from './pages/Login'
import { Overview } from './pages/Overview'
import { Accounts } from './pages/Accounts'
import { AccountStats } from './pages/AccountStats'
import { Providers } from './pages/Providers'
import { Keys } from './pages/Keys'
import { Usage } from './pages/Usage'
import { Policies } from './pages/Policies'
import { Settings } from './pages/Settings'
import { Fleet } from './pages/Fleet'
import { Users } from './pages/Users'
import { Prices } from './pages/Prices'
import { Registration } from './pages/Registration'
import { Spend } from './pages/Spend'

export interface Me {
  auth: string
  user?: { username: string }
  csrf_token?: string
}

const pages: [string, string][] = [
  ['overview', 'Overview'],
  ['accounts', 'Accounts'],
  ['providers', 'Providers'],
  ['keys', 'API keys'],
  ['usage', 'Usage'],
  ['policies', 'Policies'],
  ['fleet', 'Fleet'],
  ['users', 'Users'],
  ['prices', 'Prices'],
  ['spend', 'Spend'],
  ['registration', 'Registration'],
  ['settings', 'Settings'],
]

/** useTheme is light or dark: the saved choice, else the system's. */
export function useTheme(): [boolean, () => void] {
  const [dark, setDark] = useState(() => {
    const saved = localStorage.getItem('troupe-theme')
    return saved ? saved === 'dark' : window.matchMedia?.('(prefers-color-scheme: dark)').matches ?? false
  })
  useEffect(() => {
    document.documentElement.dataset.theme = dark ? 'dark' : 'light'
  }, [dark])
  return [
    dark,
    () =>
      setDark((d) => {
        localStorage.setItem('troupe-theme', d ? 'light' : 'dark')
        return !d
      }),
  ]
}

export function App() {
  const [me, setMe] = useState<Me | null | undefined>(undefined) // undefined: checking
  const [dark, toggleTheme] = useTheme()
  const { page, rest } = useRoute()

  const loadMe = useCallback(() => {
    api<Me>('GET', 'me')
      .then((m) => {
        setCsrf(m.csrf_token ?? '')
        setMe(m)
      })
      .catch(() => setMe(null))
  }, [])
  useEffect(() => {
    setUnauthorizedHandler(() => setMe(null))
    loadMe()
  }, [loadMe])

  if (me === undefined) return <div className="center muted">Loading…</div>
  if (me === null)
    return (
      <Login
        onLogin={(m) => {
          setCsrf(m.csrf_token ?? '')
          setMe(m)
        }}
        dark={dark}
        toggleTheme={toggleTheme}
      />
    )

  const logout = async () => {
    await api('POST', 'logout').catch(() => {})
    setCsrf('')
    setMe(null)
  }
  return (
    <div className="shell">
      <nav className="side">
        <div className="brand">Troupe</div>
        {pages.map(([id, label]) => (
          <a
            key={id}
            href={'/admin/' + (id === 'overview' ? '' : id)}
            className={page === id ? 'active' : ''}
            onClick={(e) => {
              e.preventDefault()
              navigate(id)
            }}
          >
            {label}
          </a>
        ))}
        <div className="grow" />
        <button className="ghost" onClick={toggleTheme} title="Light or dark">
          {dark ? '☀ Light' : '☾ Dark'}
        </button>
        <div className="muted small">{me.user?.username ?? 'API key'}</div>
        <button className="ghost" onClick={logout}>
          Log out
        </button>
      </nav>
      <main>
        {page === 'overview' && <Overview dark={dark} />}
        {page === 'accounts' && (rest ? <AccountStats name={rest} dark={dark} /> : <Accounts />)}
        {page === 'providers' && <Providers />}
        {page === 'keys' && <Keys />}
        {page === 'usage' && <Usage dark={dark} />}
        {page === 'policies' && <Policies name={rest} dark={dark} />}
        {page === 'fleet' && <Fleet />}
        {page === 'settings' && <Settings />}
        {page === 'users' && <Users />}
        {page === 'prices' && <Prices />}
        {page === 'spend' && <Spend dark={dark} />}
        {page === 'registration' && <Registration />}
        {!pages.some(([id]) => id === page) && <p>No such page.</p>}
      </main>
    </div>
  )
}
