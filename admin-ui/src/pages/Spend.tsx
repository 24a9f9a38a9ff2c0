import { useMemo, useState } from 'react'
import { api, query } from '../api'
import { Chart } from '../Chart'
import { num } from '../format'
import { fromMicro } from '../money'
import { dailySeries, dayRange, grandTotal, isoDay, totals, type SpendRow } from '../spend'
import { usePoll } from '../usePoll'
import type { User } from './Users'
import '../billing.css'

// The Spend page (docs/billing.md): what users spent per day and model over
// a date range, from the daily rollups per user and model (GET
// /api/admin/spend), as a chart of cost per day and a table of totals per
// user and model. Costs are summed as integers of micro-units, never floats.

const DAY = 86_400_000

/** yMoney writes the chart's axis values (micro-units) as amounts. */
const yMoney = (v: number) => fromMicro(v)

export function Spend({ dark }: { dark: boolean }) {
  const today = isoDay(Date.now())
  const [range, setRange] = useState({ from: isoDay(Date.now() - 29 * DAY), to: today })
  const [user, setUser] = useState('')
  const [model, setModel] = useState('')
  const [by, setBy] = useState<'model' | 'user'>('model')
  const r = dayRange(range.from, range.to)
  const valid = !Number.isNaN(r.from) && !Number.isNaN(r.to) && r.from < r.to
  const { data, error } = usePoll(
    () => (valid ? api<{ rows: SpendRow[] }>('GET', 'spend' + query({ from: r.fromISO, to: r.toISO, user, model })) : Promise.resolve({ rows: [] })),
    [range.from, range.to, user, model],
    60_000,
  )
  const users = usePoll(() => api<{ users: User[] }>('GET', 'users'), [], 60_000)
  const names = useMemo(() => new Map((users.data?.users ?? []).map((u) => [u.id, u.name])), [users.data])
  const name = (id: string) => names.get(id) ?? id
  const rows = data?.rows ?? []
  const chart = useMemo(() => (valid ? dailySeries(rows, r.from, r.to, by, (id) => names.get(id) ?? id) : null), [rows, r.from, r.to, by, names, valid])
  const sums = useMemo(() => totals(rows), [rows])
  const requests = rows.reduce((a, x) => a + x.requests, 0)
  return (
    <div>
      <div className="head">
        <h2>Spend</h2>
        <div className="grow" />
        <label className="inline">
          From <input type="date" name="from" value={range.from} max={range.to} onChange={(e) => setRange({ ...range, from: e.target.value })} />
        </label>
        <label className="inline">
          To <input type="date" name="to" value={range.to} min={range.from} onChange={(e) => setRange({ ...range, to: e.target.value })} />
        </label>
        <select name="user" value={user} onChange={(e) => setUser(e.target.value)}>
          <option value="">every user</option>
          {(users.data?.users ?? []).map((u) => (
            <option key={u.id} value={u.id}>
              {u.name}
            </option>
          ))}
        </select>
        <input name="model" placeholder="model" value={model} onChange={(e) => setModel(e.target.value.trim())} />
        <select name="by" value={by} onChange={(e) => setBy(e.target.value as 'model' | 'user')}>
          <option value="model">chart by model</option>
          <option value="user">chart by user</option>
        </select>
      </div>
      {!valid && <div className="error">The range's start is after its end.</div>}
      {error && <div className="error">{error}</div>}
      <div className="counts wide">
        <div className="count">
          <b data-testid="spend-total">{fromMicro(grandTotal(rows))}</b>
          <span>spent, UTC days {range.from} to {range.to}</span>
        </div>
        <div className="count">
          <b data-testid="spend-requests">{num(requests)}</b>
          <span>requests</span>
        </div>
      </div>
      <div className="card">
        {chart && (rows.length ? <Chart x={chart.x} series={chart.series} dark={dark} testid="spend-chart" yFormat={yMoney} /> : <p className="muted">No spend in this range.</p>)}
      </div>
      <table className="list" data-testid="spend-table">
        <thead>
          <tr>
            <th>User</th>
            <th>Model</th>
            <th className="r">Requests</th>
            <th className="r">Input tokens</th>
            <th className="r">Cached</th>
            <th className="r">Output tokens</th>
            <th className="r">Cost</th>
          </tr>
        </thead>
        <tbody>
          {sums.map((t) => (
            <tr key={t.user_id + '\u0000' + t.model} data-spend={name(t.user_id) + '/' + t.model}>
              <td>{name(t.user_id)}</td>
              <td>{t.model}</td>
              <td className="r">{num(t.requests)}</td>
              <td className="r">{num(t.input_tokens)}</td>
              <td className="r">{num(t.cached_tokens)}</td>
              <td className="r">{num(t.output_tokens)}</td>
              <td className="r mono" data-testid="spend-cost">
                {fromMicro(t.cost)}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  )
}
