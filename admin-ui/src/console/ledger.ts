// The ledger as the console shows it, apart from the pages (which load uPlot).

/** A ledger row of GET /api/console/balance. */
export interface LedgerRow {
  id: number
  kind: string
  amount: string
  amount_micro: number
  note: string
  request_id: string
  created_at: string
}

/** mergeLedger joins the newest rows and older pages, newest first, each row once (a row can be in both after new ones arrive). */
export function mergeLedger(newest: LedgerRow[], older: LedgerRow[]): LedgerRow[] {
  const seen = new Set<number>()
  const out: LedgerRow[] = []
  for (const r of [...newest, ...older]) {
    if (seen.has(r.id)) continue
    seen.add(r.id)
    out.push(r)
  }
  return out.sort((a, b) => b.id - a.id)
}
