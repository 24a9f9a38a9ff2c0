import { useMemo, useState } from 'react'
import { api, query } from '../api'
import { Chart } from '../Chart'
import { Counts } from '../Counts'
import { num, seconds } from '../format'
import { trendCharts, type SeriesAnswer } from '../trends'
import { usePoll } from '../usePoll'

interface Ops {
  accounts: Record<string, number>
  tiers: Record<string, number>
  cooldowns: Record<string, { count: number; min_remaining_seconds: number; max_remaining_seconds: number }>
  soonest_back: { name: string; reason: string; remaining_seconds: number }[] | null
  failures: Record<string, Record<string, number>>
  failovers: Record<string, number>
  waiters: number
  inflight: number
  policy: { name: string; version: number; rescoring: number; reload?: { OK?: boolean; Error?: string; Line?: number } }
}

const windows = ['1h', '6h', '24h', '7d']

/** Trends are the Overview's charts over the selected window. */
function Trends({ dark }: { dark: boolean }) {
  const [win, setWin] = useState('1h')
  const { data, error } = usePoll(() => api<SeriesAnswer>('GET', 'ops/series' + query({ window: win })), [win], 30_000)
  const shaped = useMemo(() => (data ? trendCharts(data) : null), [data])
  return (
    <div className="card" data-testid="trends">
      <div className="head">
        <h3>Trends</h3>
        <div className="grow" />
        <select value={win} onChange={(e) => setWin(e.target.value)} name="window" aria-label="window">
          {windows.map((w) => (
            <option key={w} value={w}>
              last {w}
            </option>
          ))}
        </select>
      </div>
      {error && <p className="error">{error}</p>}
      {shaped && (
        <div className="trends">
          {shaped.charts.map((c) => (
            <div key={c.title}>
              <h4>{c.title}</h4>
              {c.series.length ? <Chart x={shaped.x} series={c.series} dark={dark} height={180} testid={'trend-' + c.title.split(' ')[0].toLowerCase()} /> : <p className="muted">{c.empty}</p>}
            </div>
          ))}
        </div>
      )}
    </div>
  )
}

export function Overview({ dark = false }: { dark?: boolean }) {
  const { data: ops, error } = usePoll(() => api<Ops>('GET', 'ops'), [], 3000)
  if (!ops) return <div className="muted">{error || 'Loading…'}</div>
  const f5 = ops.failures['5m'] ?? {}
  const attempts = Object.values(f5).reduce((a, b) => a + b, 0)
  const failed = attempts - (f5.ok ?? 0)
  return (
    <div>
      <h2>Overview</h2>
      <div className="grid">
        <Counts title="Accounts" data={ops.accounts} order={['active', 'cooling', 'disabled', 'unauthorized', 'banned']} />
        <Counts title="Tiers" data={ops.tiers} order={['healthy', 'warm', 'risky', 'excluded']} />
        <div className="card">
          <h3>Now</h3>
          <div className="counts">
            <div className="count">
              <b>{num(ops.inflight)}</b>
              <span>in flight</span>
            </div>
            <div className="count">
              <b>{num(ops.waiters)}</b>
              <span>waiting</span>
            </div>
            <div className="count">
              <b>{num(attempts)}</b>
              <span>attempts 5m</span>
            </div>
            <div className={'count ' + (failed ? 'cooling' : 'zero')}>
              <b>{num(failed)}</b>
              <span>failed 5m</span>
            </div>
          </div>
        </div>
        <div className="card">
          <h3>Routing policy</h3>
          <p>
            <b data-testid="policy-name">{ops.policy.name}</b> <span className="muted">version {ops.policy.version}</span>
            {ops.policy.rescoring > 0 && <span className="muted"> · rescoring {ops.policy.rescoring}</span>}
          </p>
          {ops.policy.reload?.Error && <p className="error">Last reload failed (line {ops.policy.reload.Line}): {ops.policy.reload.Error}</p>}
        </div>
      </div>
      <Trends dark={dark} />
      <div className="grid">
        <div className="card">
          <h3>Failures by class</h3>
          <table>
            <thead>
              <tr>
                <th>class</th>
                {['1m', '5m', '15m', '60m'].map((w) => (
                  <th key={w} className="r">
                    {w}
                  </th>
                ))}
              </tr>
            </thead>
            <tbody>
              {Array.from(new Set(Object.values(ops.failures).flatMap((r) => Object.keys(r))))
                .sort()
                .map((c) => (
                  <tr key={c}>
                    <td>{c}</td>
                    {['1m', '5m', '15m', '60m'].map((w) => (
                      <td key={w} className="r">
                        {num(ops.failures[w]?.[c] ?? 0)}
                      </td>
                    ))}
                  </tr>
                ))}
            </tbody>
          </table>
        </div>
        <div className="card">
          <h3>Cooling down</h3>
          {Object.keys(ops.cooldowns).length === 0 && <p className="muted">No account is cooling down.</p>}
          <table>
            <tbody>
              {Object.entries(ops.cooldowns).map(([reason, g]) => (
                <tr key={reason}>
                  <td>{reason}</td>
                  <td className="r">{num(g.count)}</td>
                  <td className="r muted">
                    {seconds(g.min_remaining_seconds)}–{seconds(g.max_remaining_seconds)}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          {(ops.soonest_back ?? []).length > 0 && <h4>Back soonest</h4>}
          <ul className="plain">
            {(ops.soonest_back ?? []).slice(0, 8).map((a) => (
              <li key={a.name}>
                {a.name} <span className="muted">({a.reason}) in {seconds(a.remaining_seconds)}</span>
              </li>
            ))}
          </ul>
        </div>
        <div className="card">
          <h3>Failovers per request</h3>
          <div className="counts">
            {['0', '1', '2', '3', '4+'].map((k) => (
              <div key={k} className="count">
                <b>{num(ops.failovers[k] ?? 0)}</b>
                <span>{k} extra</span>
              </div>
            ))}
          </div>
        </div>
      </div>
    </div>
  )
}
