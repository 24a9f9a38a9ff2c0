import { ms, num, pct } from './format'
import { counted, type Summary } from './stats'

/** ProviderSummary is one provider's row of GET /api/admin/stats/providers. */
export type ProviderSummary = Summary & { provider: string }

/** ProvidersAnswer is GET /api/admin/stats/providers?window=… (docs/admin-api.md#statistics). */
export interface ProvidersAnswer {
  window: string
  instance: string // the instance whose counts these are
  since: string // when it began counting
  providers: ProviderSummary[]
}

const q3 = (q: { count: number; p50: number; p95: number; p99: number }) => (q.count ? [q.p50, q.p95, q.p99].map(ms).join(' · ') : '–')

/**
 * ProvidersTable shows every provider's attempts over one window: requests,
 * success rate, failure classes, statuses, latency and TTFT quantiles and
 * tokens. Kept apart from the page so it renders in unit tests.
 */
export function ProvidersTable({ rows }: { rows: ProviderSummary[] }) {
  return (
    <table className="stats providers" data-testid="providers-table">
      <thead>
        <tr>
          <th>provider</th>
          <th className="r">requests</th>
          <th className="r">success</th>
          <th>errors</th>
          <th>statuses</th>
          <th className="r">latency p50 · p95 · p99</th>
          <th className="r">TTFT p50 · p95 · p99</th>
          <th className="r">tokens in · out · cache read · write</th>
        </tr>
      </thead>
      <tbody>
        {rows.map((s) => (
          <tr key={s.provider} data-testid={'provider-' + s.provider}>
            <td>{s.provider}</td>
            <td className="r" data-testid={'provider-requests-' + s.provider}>
              {num(s.requests)}
            </td>
            <td className={s.requests && s.success_rate < 0.9 ? 'r bad' : 'r'} data-testid={'provider-success-' + s.provider}>
              {s.requests ? pct(s.success_rate) : '–'}
            </td>
            <td>{counted(s.errors)}</td>
            <td>{counted(s.statuses)}</td>
            <td className="r" data-testid={'provider-latency-' + s.provider}>
              {q3(s.latency_ms)}
            </td>
            <td className="r">{q3(s.ttft_ms)}</td>
            <td className="r">
              {num(s.tokens.input, true)} · {num(s.tokens.output, true)} · {num(s.tokens.cache_read, true)} · {num(s.tokens.cache_write, true)}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  )
}
