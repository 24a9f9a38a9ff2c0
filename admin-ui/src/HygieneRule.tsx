import { ago } from './format'

/** HygieneAnswer is GET /api/admin/hygiene (docs/admin-api.md#account-hygiene). */
export interface HygieneAnswer {
  rule: { action: string; unauthorized_after: string; rate_limited_after: string; interval: string }
  flags: { account_id: string; name: string; action: string; reason: string; kind: string; since: string; at: string }[] | null
}

/** never reads a Go duration string as "never" when it is zero. */
const never = (d: string) => (d === '0s' ? 'never' : d)

/**
 * HygieneRule shows the account hygiene rule as configured (hygiene.* in the
 * configuration; read-only here) and the accounts it flagged or disabled,
 * each with its reason. Restoring one is on its panel in Accounts.
 */
export function HygieneRule({ data, now = Date.now() }: { data: HygieneAnswer; now?: number }) {
  const r = data.rule
  const on = r.action === 'flag' || r.action === 'disable'
  const flags = data.flags ?? []
  return (
    <div className="card" data-testid="hygiene-rule">
      <h3>Account hygiene</h3>
      {on ? (
        <p data-testid="hygiene-rule-text">
          {r.action === 'disable' ? 'Disables' : 'Flags'} an account unauthorized for {r.unauthorized_after} or rate limited at every sweep for {never(r.rate_limited_after)}; sweeps every{' '}
          {r.interval}.
        </p>
      ) : (
        <p data-testid="hygiene-rule-text">Off: no account is flagged or disabled for failing.</p>
      )}
      <p className="muted small">
        Set in the configuration (<span className="mono">hygiene.action</span>, <span className="mono">hygiene.unauthorized_after</span>,{' '}
        <span className="mono">hygiene.rate_limited_after</span>, <span className="mono">hygiene.interval</span>). Restore an account from its panel in Accounts.
      </p>
      {flags.length > 0 && (
        <table data-testid="hygiene-flags">
          <tbody>
            {flags.map((f) => (
              <tr key={f.account_id}>
                <td>{f.name}</td>
                <td>{f.action === 'disable' ? 'disabled' : 'flagged'}</td>
                <td title={f.at}>{ago(f.at, now)}</td>
                <td>{f.reason}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {on && flags.length === 0 && <p className="muted">No account flagged.</p>}
    </div>
  )
}
