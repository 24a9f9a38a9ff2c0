import { useMemo, useState } from 'react'
import { query } from '../../api'
import { Chart } from '../../Chart'
import { num } from '../../format'
import { usePoll } from '../../usePoll'
import { consoleApi } from '../api'
import { dayRange, money, spendCharts, totals, type SpendRow } from '../money'
import { type LedgerRow } from '../ledger'
import { useLedgerPages } from '../../ledger'

interface Balance {
  balance: string
  balance_micro: number
  currency: string
  ledger: LedgerRow[]
  next_before: number | null
}

const ranges: Record<string, number> = { '7 days': 7, '30 days': 30, '90 days': 90 }

/**
 * Dashboard shows the user's balance, spend and requests per day by model
 * over the range picked (GET /api/console/spend, the daily rollups) and
 * the newest ledger rows (GET /api/console/balance).
 */
export function Dashboard({ dark }: { dark: boolean }) {
  const [range, setRange] = useState('30 days')
  const days = ranges[range]
  const bal = usePoll(() => consoleApi<Balance>('GET', 'balance' + query({ limit: 10 })), [], 30_000)
  const spend = usePoll(
    () => {
      const r = dayRange(days)
      return consoleApi<{ rows: SpendRow[]; currency: string }>('GET', 'spend' + query(r)).then((a) => ({ ...a, ...r }))
    },
    [days],
    30_000,
  )
  // Older ledger rows, page by page (next_before), below the newest ten that refresh.
  const pages = useLedgerPages(bal.data, (before) => consoleApi<Balance>('GET', 'balance' + query({ limit: 50, before })))
  const ledger = pages.rows
  const charts = useMemo(() => (spend.data ? spendCharts(spend.data.rows, spend.data.from, spend.data.to) : null), [spend.data])
  const sum = useMemo(() => totals(spend.data?.rows ?? []), [spend.data])
  const currency = bal.data?.currency ?? spend.data?.currency ?? ''

  return (
    <div>
      <div className="head">
        <h2>Dashboard</h2>
        <div className="grow" />
        <select value={range} onChange={(e) => setRange(e.target.value)} name="range" aria-label="Range">
          {Object.keys(ranges).map((r) => (
            <option key={r} value={r}>
              last {r}
            </option>
          ))}
        </select>
      </div>
      {(bal.error || spend.error) && <div className="error">{bal.error || spend.error}</div>}
      <div className="counts wide">
        <div className={'count balance' + ((bal.data?.balance_micro ?? 0) < 0 ? ' negative' : '')}>
          <b data-testid="balance">{bal.data ? `${money(bal.data.balance_micro)} ${currency}` : '–'}</b>
          <span>balance</span>
        </div>
        <div className="count">
          <b data-testid="spend-total">{spend.data ? `${money(sum.cost)} ${currency}` : '–'}</b>
          <span>spent, last {range}</span>
        </div>
        <div className="count">
          <b data-testid="spend-requests">{spend.data ? num(sum.requests) : '–'}</b>
          <span>requests, last {range}</span>
        </div>
        <div className="count">
          <b>{spend.data ? num(sum.tokens, true) : '–'}</b>
          <span>tokens in + out</span>
        </div>
      </div>
      <div className="grid">
        <div className="card">
          <h3>Spend per day ({currency || '…'})</h3>
          {charts &&
            (charts.spend.length ? (
              <Chart x={charts.x} series={charts.spend} dark={dark} height={220} testid="spend-chart" />
            ) : (
              <p className="muted">No requests in this range.</p>
            ))}
        </div>
        <div className="card">
          <h3>Requests per day</h3>
          {charts &&
            (charts.requests.length ? (
              <Chart x={charts.x} series={charts.requests} dark={dark} height={220} testid="requests-chart" />
            ) : (
              <p className="muted">No requests in this range.</p>
            ))}
        </div>
      </div>
      <div className="card" style={{ marginTop: 14 }}>
        <h3>Recent balance changes</h3>
        <LedgerTable rows={ledger} currency={currency} />
        {bal.data && ledger.length === 0 && <p className="muted">No balance changes yet.</p>}
        {pages.error && <div className="error">{pages.error}</div>}
        {pages.before !== null ? (
          <button onClick={pages.loadOlder} disabled={pages.busy} style={{ marginTop: 8 }}>
            Older changes
          </button>
        ) : null}
      </div>
    </div>
  )
}

const kinds: Record<string, string> = { topup: 'top-up', charge: 'charge', refund: 'refund', adjustment: 'adjustment' }

/** LedgerTable lists ledger rows, newest first: credits green, charges with the request they paid for. */
export function LedgerTable({ rows, currency }: { rows: LedgerRow[]; currency: string }) {
  if (!rows.length) return null
  return (
    <table className="list small" data-testid="ledger">
      <thead>
        <tr>
          <th>Time</th>
          <th>Kind</th>
          <th className="r">Amount ({currency})</th>
          <th>Note</th>
          <th>Request</th>
        </tr>
      </thead>
      <tbody>
        {rows.map((r) => (
          <tr key={r.id} data-ledger={r.kind}>
            <td>{new Date(r.created_at).toLocaleString()}</td>
            <td>{kinds[r.kind] ?? r.kind}</td>
            <td className={'amount' + (r.amount_micro > 0 ? ' credit' : '')}>
              {r.amount_micro > 0 ? '+' : ''}
              {money(r.amount_micro)}
            </td>
            <td>{r.note}</td>
            <td className="mono">{r.request_id}</td>
          </tr>
        ))}
      </tbody>
    </table>
  )
}
