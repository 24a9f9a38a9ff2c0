// The ledger row as the console shows it, apart from the pages (which load uPlot);
// the paging is the admin UI's too (../ledger).

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
