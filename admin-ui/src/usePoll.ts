import { useCallback, useEffect, useRef, useState } from 'react'

/** usePoll loads fn now and every `every` ms (0: once); reload() reloads at once. */
export function usePoll<T>(fn: () => Promise<T>, deps: unknown[], every = 0) {
  const [data, setData] = useState<T | null>(null)
  const [error, setError] = useState('')
  const fnRef = useRef(fn)
  fnRef.current = fn
  const reload = useCallback(() => {
    fnRef
      .current()
      .then((d) => {
        setData(d)
        setError('')
      })
      .catch((e: Error) => setError(e.message))
  }, [])
  useEffect(() => {
    reload()
    if (!every) return
    const t = setInterval(reload, every)
    return () => clearInterval(t)
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, deps)
  return { data, error, reload, setData }
}
