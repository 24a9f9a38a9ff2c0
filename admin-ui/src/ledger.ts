import { useEffect, useMemo, useRef, useState } from 'react'

// A user's ledger, newest first, paged with next_before: the users' console
// (GET /api/console/balance) and the admin Users page (GET
// /api/admin/users/{id}/ledger) both show the newest page, refreshed, and
// older pages loaded on demand below it, through useLedgerPages.

/** LedgerPage is a page of ledger rows, newest first, with the cursor of the next older page (null: none). */
export interface LedgerPage<T> {
  ledger: T[]
  next_before: number | null
}

/** Older is the older rows kept below the newest page: the rows shown when the first older page was loaded and every older page since. */
export interface Older<T> {
  rows: T[]
  next: number | null
}

/** mergeLedger joins the newest rows and older pages, newest first, each row once (a row can be in both after new ones arrive). */
export function mergeLedger<T extends { id: number }>(newest: T[], older: T[]): T[] {
  const seen = new Set<number>()
  const out: T[] = []
  for (const r of [...newest, ...older]) {
    if (seen.has(r.id)) continue
    seen.add(r.id)
    out.push(r)
  }
  return out.sort((a, b) => b.id - a.id)
}

/**
 * followNewest keeps the older rows below a refreshed newest page while the two still meet, or
 * returns null to drop them: when the newest page no longer reaches the newest row kept (more new
 * rows arrived than a page holds), rows between the two may be missing, and the list must not show a gap.
 */
export function followNewest<T extends { id: number }>(older: Older<T> | null, newest: LedgerPage<T>): Older<T> | null {
  if (!older) return null
  const high = older.rows.reduce((m, r) => Math.max(m, r.id), -Infinity)
  if (newest.next_before !== null && newest.next_before > high) return null
  return { rows: mergeLedger(newest.ledger, older.rows), next: older.next }
}

/**
 * useLedgerPages shows a ledger's newest page (refreshed by its owner) with older pages below it:
 * rows (newest first, each once, never with a gap), before (the cursor of the next older page;
 * null when there is none), loadOlder (fetches it with fetchOlder) and the error of the last load.
 */
export function useLedgerPages<T extends { id: number }>(newest: LedgerPage<T> | null | undefined, fetchOlder: (before: number) => Promise<LedgerPage<T>>) {
  const [older, setOlder] = useState<Older<T> | null>(null)
  const [error, setError] = useState('')
  const [busy, setBusy] = useState(false)
  const newestRef = useRef(newest)
  newestRef.current = newest
  useEffect(() => {
    if (newest) setOlder((o) => followNewest(o, newest))
  }, [newest])
  const rows = useMemo(() => mergeLedger(newest?.ledger ?? [], older?.rows ?? []), [newest, older])
  const before = older ? older.next : (newest?.next_before ?? null)
  const loadOlder = async () => {
    const from = newestRef.current
    if (before === null || busy || !from) return
    setBusy(true)
    try {
      const page = await fetchOlder(before)
      setOlder((o) => {
        const next = { rows: [...(o ? o.rows : from.ledger), ...page.ledger], next: page.next_before }
        // A refresh that came while the page was loading has to meet it too.
        return newestRef.current ? followNewest(next, newestRef.current) : next
      })
      setError('')
    } catch (e) {
      setError((e as Error).message)
    } finally {
      setBusy(false)
    }
  }
  return { rows, before, loadOlder, error, busy }
}
