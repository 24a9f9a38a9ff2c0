import { ms, num, pct } from './format'
import { counted, type Summary } from './stats'

// Apart from the account page, which loads uPlot (it needs a browser), so
// the table renders in unit tests.

/** WindowsTable shows an account's summary over every window, one row each. */
export function WindowsTable({ windows, selected, onSelect }: { windows: Summary[]; selected: string; onSelect: (w: string) => void }) {
  return (
    <table className="stats" data-testid="account-windows">
      <thead>
        <tr>
          <th>window</th>
          <th className="r">requests</th>
          <th className="r">success</th>
          <th>errors</th>
          <th>statuses</th>
          <th className="r">latency p50 · p95 · p99</th>
          <th className="r">TTFT p50 · p95 · p99</th>
          <th className="r">tokens in · out · cached</th>
        </tr>
      </thead>
      <tbody>
        {windows.map((s) => (
          <tr key={s.window} className={s.window === selected ? 'sel' : ''} onClick={() => onSelect(s.window)} data-testid={'window-' + s.window}>
            <td>{s.window}</td>
            <td className="r">{num(s.requests)}</td>
            <td className="r" data-testid={'success-' + s.window}>
              {s.requests ? pct(s.success_rate) : '–'}
            </td>
            <td>{counted(s.errors)}</td>
            <td>{counted(s.statuses)}</td>
            <td className="r">{s.latency_ms.count ? [s.latency_ms.p50, s.latency_ms.p95, s.latency_ms.p99].map(ms).join(' · ') : '–'}</td>
            <td className="r">{s.ttft_ms.count ? [s.ttft_ms.p50, s.ttft_ms.p95, s.ttft_ms.p99].map(ms).join(' · ') : '–'}</td>
            <td className="r">
              {num(s.tokens.input, true)} · {num(s.tokens.output, true)} · {num(s.tokens.cache_read, true)}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  )
}
