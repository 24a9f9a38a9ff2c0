import { useMemo, useState } from 'react'
import { api, query } from '../api'
import { Chart } from '../Chart'
import { align } from '../chartdata'
import { ms, num } from '../format'
import { fromMicro } from '../money'
import { usePoll } from '../usePoll'

interface Point {
  t: string
  requests: number
  errors: number
  input_tokens: number
  output_tokens: number
  cached_tokens: number
}
interface UsageAnswer {
  from: string
  to: string
  bucket: string
  series: { id: string; name: string; total: Point; points: Point[] }[]
  total: Point
  groups: number
}
interface Rec {
  request_id: string
  at: string
  key: string
  account: string
  model: string
  route: string
  stream: boolean
  status: number
  error_class: string
  attempts: number
  latency_ms: number
  ttft_ms: number
  input_tokens: number
  output_tokens: number
  cost: string // what the request cost its user, a decimal string of the currency
  cost_micro: number // the same in micro-units (shown: exact, no float rounding)
}

const ranges: Record<string, [number, string]> = { '24h': [24, 'hour'], '7d': [24 * 7, 'hour'], '30d': [24 * 30, 'day'], '90d': [24 * 90, 'day'] }

export function Usage({ dark }: { dark: boolean }) {
  const [by, setBy] = useState('model')
  const [range, setRange] = useState('24h')
  const [metric, setMetric] = useState<keyof Point>('requests')
  const [hours, bucket] = ranges[range]
  const { data } = usePoll(() => {
    const to = new Date(Math.ceil(Date.now() / 3_600_000) * 3_600_000)
    const from = new Date(to.getTime() - hours * 3_600_000)
    return api<UsageAnswer>('GET', 'usage' + query({ group_by: by, bucket, from: from.toISOString().replace(/\.\d+Z$/, 'Z'), to: to.toISOString().replace(/\.\d+Z$/, 'Z') }))
  }, [by, range], 30_000)
  const chart = useMemo(() => {
    if (!data) return null
    const step = data.bucket === 'day' ? 86400 : 3600
    return align(
      Date.parse(data.from) / 1000,
      Date.parse(data.to) / 1000,
      step,
      data.series.map((s) => ({ label: s.name || s.id || '(none)', points: s.points.map((p) => ({ t: p.t, v: Number(p[metric]) })) })),
    )
  }, [data, metric])

  return (
    <div>
      <div className="head">
        <h2>Usage</h2>
        <div className="grow" />
        <select value={range} onChange={(e) => setRange(e.target.value)} name="range">
          {Object.keys(ranges).map((r) => (
            <option key={r}>{r}</option>
          ))}
        </select>
        <select value={by} onChange={(e) => setBy(e.target.value)} name="group_by">
          <option value="model">by model</option>
          <option value="key">by key</option>
          <option value="account">by account</option>
        </select>
        <select value={metric} onChange={(e) => setMetric(e.target.value as keyof Point)} name="metric">
          <option value="requests">requests</option>
          <option value="errors">errors</option>
          <option value="input_tokens">input tokens</option>
          <option value="output_tokens">output tokens</option>
        </select>
      </div>
      {data && (
        <div className="counts wide">
          <div className="count">
            <b data-testid="usage-requests">{num(data.total.requests)}</b>
            <span>requests</span>
          </div>
          <div className={'count ' + (data.total.errors ? 'cooling' : '')}>
            <b>{num(data.total.errors)}</b>
            <span>errors</span>
          </div>
          <div className="count">
            <b>{num(data.total.input_tokens, true)}</b>
            <span>input tokens</span>
          </div>
          <div className="count">
            <b>{num(data.total.output_tokens, true)}</b>
            <span>output tokens</span>
          </div>
        </div>
      )}
      <div className="card">{chart && (chart.series.length ? <Chart x={chart.x} series={chart.series} dark={dark} /> : <p className="muted">No traffic in this range.</p>)}</div>
      <RequestLog />
    </div>
  )
}

/** RequestLog is the admin request log (GET /api/admin/usage/requests), newest first, with each request's cost. */
export function RequestLog() {
  const [f, setF] = useState({ model: '', key: '', account: '', status: '', failed: false })
  const [recs, setRecs] = useState<Rec[]>([])
  const [next, setNext] = useState<string | null>(null)
  const [error, setError] = useState('')
  const load = (cursor?: string) =>
    api<{ records: Rec[]; next_cursor: string | null }>('GET', 'usage/requests' + query({ ...f, limit: 100, cursor }))
      .then((r) => {
        setRecs((old) => (cursor ? [...old, ...r.records] : r.records))
        setNext(r.next_cursor)
        setError('')
      })
      .catch((e: Error) => setError(e.message))
  usePoll(() => load(), [f.model, f.key, f.account, f.status, f.failed], 10_000)
  const set = (k: 'model' | 'key' | 'account' | 'status') => (e: { target: { value: string } }) => setF({ ...f, [k]: e.target.value })
  return (
    <div className="card">
      <h3>Request log</h3>
      <div className="filters">
        <input placeholder="model" value={f.model} onChange={set('model')} />
        <input placeholder="key id" value={f.key} onChange={set('key')} />
        <input placeholder="account id" value={f.account} onChange={set('account')} />
        <input placeholder="status" value={f.status} onChange={set('status')} inputMode="numeric" />
        <label className="check">
          <input type="checkbox" checked={f.failed} onChange={(e) => setF({ ...f, failed: e.target.checked })} /> failed only
        </label>
      </div>
      {error && <div className="error">{error}</div>}
      <table className="list small">
        <thead>
          <tr>
            <th>Time</th>
            <th>Key</th>
            <th>Account</th>
            <th>Model</th>
            <th>Route</th>
            <th className="r">Status</th>
            <th className="r">Attempts</th>
            <th className="r">Latency</th>
            <th className="r">TTFT</th>
            <th className="r">Tokens in/out</th>
            <th className="r">Cost</th>
          </tr>
        </thead>
        <tbody>
          {recs.map((r) => (
            <tr key={r.request_id} title={r.request_id}>
              <td>{new Date(r.at).toLocaleString()}</td>
              <td>{r.key || '–'}</td>
              <td>{r.account || '–'}</td>
              <td>{r.model}</td>
              <td>
                {r.route}
                {r.stream ? ' (stream)' : ''}
              </td>
              <td className={'r ' + (r.status >= 400 ? 'bad' : '')}>
                {r.status} {r.error_class}
              </td>
              <td className="r">{r.attempts}</td>
              <td className="r">{ms(r.latency_ms)}</td>
              <td className="r">{r.ttft_ms ? ms(r.ttft_ms) : '–'}</td>
              <td className="r">
                {num(r.input_tokens)}/{num(r.output_tokens)}
              </td>
              <td className="r" data-testid="cost">
                {fromMicro(r.cost_micro)}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {recs.length === 0 && <p className="muted">No requests match.</p>}
      {next && <button onClick={() => load(next)}>Load more</button>}
    </div>
  )
}
