import { useRef, useState } from 'react'
import { query } from '../../api'
import { ms, num } from '../../format'
import { usePoll } from '../../usePoll'
import { consoleApi } from '../api'
import { money } from '../money'

/** One request of GET /api/console/usage. */
export interface ConsoleRecord {
  request_id: string
  at: string
  key_id: string
  key: string
  model: string
  route: string
  stream: boolean
  status: number
  latency_ms: number
  input_tokens: number
  cached_tokens: number
  output_tokens: number
  estimated: boolean
  cost: string
  cost_micro: number
}

/** appendPage adds a page of records to those shown, dropping any already there (a page read again after new requests). */
export function appendPage(old: ConsoleRecord[], page: ConsoleRecord[]): ConsoleRecord[] {
  const seen = new Set(old.map((r) => r.request_id))
  return [...old, ...page.filter((r) => !seen.has(r.request_id))]
}

/**
 * Requests is the user's request log, newest first, with each request's
 * cost; 50 a page, the next page by the answer's next_cursor. The first
 * page refreshes every 15 s until the user loads more.
 */
export function Requests() {
  const [model, setModel] = useState('')
  const [recs, setRecs] = useState<ConsoleRecord[]>([])
  const [next, setNext] = useState<string | null>(null)
  const [paged, setPaged] = useState(false)
  const [error, setError] = useState('')
  const [busy, setBusy] = useState(false)
  // Only the latest load's answer is shown: a refresh of the first page
  // that answers after "Load more" must not put the first page back.
  const latest = useRef(0)
  const load = (cursor?: string) => {
    const mine = ++latest.current
    setBusy(true)
    return consoleApi<{ records: ConsoleRecord[]; next_cursor: string | null }>('GET', 'usage' + query({ model: model.trim(), limit: 50, cursor }))
      .then((r) => {
        if (mine !== latest.current) return
        setRecs((old) => (cursor ? appendPage(old, r.records) : r.records))
        setNext(r.next_cursor)
        setPaged(!!cursor)
        setError('')
      })
      .catch((e: Error) => mine === latest.current && setError(e.message))
      .finally(() => mine === latest.current && setBusy(false))
  }
  usePoll(() => (paged ? Promise.resolve() : load()), [model, paged], 15_000)
  const shownCost = recs.reduce((a, r) => a + r.cost_micro, 0)
  return (
    <div>
      <div className="head">
        <h2>Requests</h2>
        <div className="grow" />
        <input placeholder="model" name="model" value={model} onChange={(e) => setModel(e.target.value)} aria-label="Model" />
      </div>
      {error && <div className="error">{error}</div>}
      <div className="card">
        <table className="list small" data-testid="requests">
          <thead>
            <tr>
              <th>Time</th>
              <th>Key</th>
              <th>Model</th>
              <th>Route</th>
              <th className="r">Status</th>
              <th className="r">Latency</th>
              <th className="r">Tokens in</th>
              <th className="r">cached</th>
              <th className="r">out</th>
              <th className="r">Cost</th>
            </tr>
          </thead>
          <tbody>
            {recs.map((r) => (
              <tr key={r.request_id} title={r.request_id} data-request={r.request_id}>
                <td>{new Date(r.at).toLocaleString()}</td>
                <td>{r.key || <span className="muted">revoked</span>}</td>
                <td>{r.model}</td>
                <td>
                  {r.route}
                  {r.stream ? ' (stream)' : ''}
                </td>
                <td className={'r ' + (r.status >= 400 ? 'bad' : '')}>{r.status}</td>
                <td className="r">{ms(r.latency_ms)}</td>
                <td className="r">{num(r.input_tokens)}</td>
                <td className="r">{num(r.cached_tokens)}</td>
                <td className="r">
                  {num(r.output_tokens)}
                  {r.estimated && <span title="estimated: the upstream reported no usage">*</span>}
                </td>
                <td className="amount" data-testid="cost">
                  {money(r.cost_micro)}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
        {recs.length === 0 && !error && <p className="muted">No requests yet.</p>}
        <div className="row" style={{ marginTop: 10 }}>
          <span className="muted small" data-testid="requests-shown">
            {recs.length} requests shown, {money(shownCost)} in all
          </span>
          <div className="grow" />
          {paged && (
            <button className="ghost" onClick={() => setPaged(false)}>
              Back to the newest
            </button>
          )}
          {next && (
            <button onClick={() => load(next)} disabled={busy}>
              Load more
            </button>
          )}
        </div>
      </div>
    </div>
  )
}
