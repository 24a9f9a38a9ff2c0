import { useEffect, useState } from 'react'

// The console's routes live under /console/ (the admin UI's under /admin/,
// ../router): the page is the first path segment.

export const CONSOLE_BASE = '/console/'

/** The console's pages; login and register are for visitors, the rest for a session. */
export const consolePages = ['dashboard', 'keys', 'requests', 'account', 'login', 'register'] as const

/** consoleRoute returns the page a pathname under CONSOLE_BASE names ('dashboard' for the base itself). */
export function consoleRoute(pathname: string): string {
  const p = pathname.startsWith(CONSOLE_BASE) ? pathname.slice(CONSOLE_BASE.length) : ''
  return p.replace(/\/+$/, '').split('/')[0] || 'dashboard'
}

/** consoleHref is the path of a console page. */
export function consoleHref(page: string): string {
  return CONSOLE_BASE + (page === 'dashboard' ? '' : page)
}

/** consoleNavigate goes to a console page without reloading. */
export function consoleNavigate(page: string) {
  const path = consoleHref(page)
  if (path !== window.location.pathname) window.history.pushState(null, '', path)
  window.dispatchEvent(new PopStateEvent('popstate'))
}

/** useConsoleRoute follows the location. */
export function useConsoleRoute(): string {
  const [r, setR] = useState(() => consoleRoute(window.location.pathname))
  useEffect(() => {
    const on = () => setR(consoleRoute(window.location.pathname))
    window.addEventListener('popstate', on)
    return () => window.removeEventListener('popstate', on)
  }, [])
  return r
}
