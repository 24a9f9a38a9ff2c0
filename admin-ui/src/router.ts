import { useEffect, useState } from 'react'

// A small router for the UI served under /admin/: pages are the first path
// segment, the rest is the page's own (a policy name).

export const BASE = '/admin/'

/** route splits a pathname under BASE into page and rest. */
export function route(pathname: string): { page: string; rest: string } {
  let p = pathname.startsWith(BASE) ? pathname.slice(BASE.length) : pathname.replace(/^\/+/, '')
  p = p.replace(/\/+$/, '')
  const [page, ...rest] = p.split('/')
  return { page: page || 'overview', rest: rest.map(decodeURIComponent).join('/') }
}

/** navigate goes to a page of the UI without reloading. */
export function navigate(page: string, rest = '') {
  const path = BASE + (page === 'overview' ? '' : page) + (rest ? '/' + encodeURIComponent(rest) : '')
  if (path !== window.location.pathname) window.history.pushState(null, '', path)
  window.dispatchEvent(new PopStateEvent('popstate'))
}

/** useRoute follows the location. */
export function useRoute() {
  const [r, setR] = useState(() => route(window.location.pathname))
  useEffect(() => {
    const on = () => setR(route(window.location.pathname))
    window.addEventListener('popstate', on)
    return () => window.removeEventListener('popstate', on)
  }, [])
  return r
}
