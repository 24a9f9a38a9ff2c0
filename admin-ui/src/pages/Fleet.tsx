import { useState } from 'react'
import { api } from '../api'
import { ago, num } from '../format'
import { usePoll } from '../usePoll'

/** FleetMember is one live instance in GET /api/admin/fleet. */
export interface FleetMember {
  id: string
  addr?: string
  started: string
  self?: boolean
  heartbeat_age_ms?: number // since the member's own last heartbeat, as of the answer
}

/** FleetAccount is one account's owner in GET /api/admin/fleet. */
export interface FleetAccount {
  id: string
  name: string
  owner: string // the member that owns it by rendezvous hashing over the live set
  held?: boolean // this instance holds its ownership lease
  token?: number
}

/** FleetAnswer is GET /api/admin/fleet (docs/admin-api.md#fleet). */
export interface FleetAnswer {
  self: string
  shared: boolean
  ownership: boolean
  version: number
  heartbeat?: string // this instance's last successful heartbeat
  error?: string // the last heartbeat's failure
  members: FleetMember[]
  accounts: FleetAccount[]
  owned: number
  remote_views?: number // accounts other instances own whose views this scheduler indexes
  remote?: FleetRemote // remote grants since start; absent without routing across instances
}

/** FleetRemote counts remote grants since this instance started. */
export interface FleetRemote {
  issued: number // leases granted to other instances
  received: number // leases other instances granted here
  held: number // leases granted to others, not released yet
  refused: Record<string, number> // by reason
}

/** ACCOUNT_ROWS bounds the accounts drawn at once; the search narrows them. */
export const ACCOUNT_ROWS = 200

/** heartbeatAge is the age of a heartbeat to the tenth of a second under a minute. */
export function heartbeatAge(iso: string | undefined, now = Date.now()): string {
  if (!iso) return 'never'
  const d = (now - Date.parse(iso)) / 1000
  if (Number.isNaN(d)) return '–'
  return d < 60 ? `${Math.max(d, 0).toFixed(1)} s ago` : ago(iso, now)
}

/** memberSeen is when a member last announced itself: its own heartbeat's age (a server without member ages: the answering instance's last read of the set). */
export function memberSeen(m: FleetMember, data: FleetAnswer, now = Date.now()): string {
  if (!data.shared) return 'alone'
  if (m.heartbeat_age_ms == null) return heartbeatAge(data.heartbeat, now)
  return heartbeatAge(new Date(now - m.heartbeat_age_ms).toISOString(), now)
}

/**
 * Fleet is the fleet page (/admin/fleet): the deployment's live instances
 * and which one owns each account (GET /api/admin/fleet, refreshed every
 * 2 s). The answer is the answering instance's view of the live set.
 */
export function Fleet() {
  const { data, error } = usePoll(() => api<FleetAnswer>('GET', 'fleet'), [], 2000)
  return (
    <div className="page-fleet">
      <div className="head">
        <h2>Fleet</h2>
      </div>
      {error && <div className="error">{error}</div>}
      {data && <FleetView data={data} />}
    </div>
  )
}

/** FleetView is the page below its head; kept apart so it renders in unit tests. */
export function FleetView({ data, now = Date.now() }: { data: FleetAnswer; now?: number }) {
  const [q, setQ] = useState('')
  const owned = new Map<string, number>()
  for (const a of data.accounts) owned.set(a.owner, (owned.get(a.owner) ?? 0) + 1)
  const needle = q.trim().toLowerCase()
  const shown = needle ? data.accounts.filter((a) => a.name.toLowerCase().includes(needle) || a.id.includes(needle) || a.owner.toLowerCase().includes(needle)) : data.accounts
  return (
    <>
      <p className="muted small" data-testid="fleet-source">
        As seen by instance <b>{data.self}</b>
        {data.shared ? ', from the live set in Redis' : ' (cache.driver memory: this instance alone)'}
        {'. '}Ownership {data.ownership ? <b>on</b> : 'off'}
        {data.ownership ? `: ${num(data.owned)} accounts run here.` : ': every instance runs every account.'}{' '}
        {data.shared ? (
          <>
            Live set last read <span data-testid="fleet-heartbeat">{heartbeatAge(data.heartbeat, now)}</span>.
          </>
        ) : (
          <span data-testid="fleet-heartbeat">No heartbeat: nothing to share it with.</span>
        )}
      </p>
      {data.remote && (
        <p className="muted small" data-testid="fleet-remote">
          Routing across instances: {num(data.remote_views ?? 0)} accounts of other instances in this scheduler; remote leases granted to others {num(data.remote.issued)} (
          {num(data.remote.held)} held now), received {num(data.remote.received)}; refused{' '}
          {Object.entries(data.remote.refused)
            .filter(([, n]) => n > 0)
            .map(([r, n]) => `${r} ×${num(n)}`)
            .join(' · ') || 'none'}
          .
        </p>
      )}
      {data.error && (
        <div className="error" data-testid="fleet-error">
          Heartbeat failing: {data.error}
        </div>
      )}
      <h3>Members ({data.members.length})</h3>
      <table className="stats fleet-members" data-testid="fleet-members">
        <thead>
          <tr>
            <th>instance</th>
            <th>address</th>
            <th>started</th>
            <th className="r">accounts owned</th>
            <th>seen live</th>
          </tr>
        </thead>
        <tbody>
          {data.members.map((m) => (
            <tr key={m.id} data-testid={'member-' + m.id} className={m.self ? 'sel' : ''}>
              <td>
                {m.id}
                {m.self && <span className="muted"> (this one)</span>}
              </td>
              <td>{m.addr || '–'}</td>
              <td title={m.started}>{ago(m.started, now)}</td>
              <td className="r" data-testid={'member-owned-' + m.id}>
                {num(owned.get(m.id) ?? 0)}
              </td>
              <td data-testid={'member-seen-' + m.id}>{memberSeen(m, data, now)}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <div className="head">
        <h3>Accounts ({num(data.accounts.length)})</h3>
        <div className="grow" />
        <input name="fleet-q" className="fleet-search" placeholder="Search name, id or owner" aria-label="Search accounts by name, id or owner" value={q} onChange={(e) => setQ(e.target.value)} />
      </div>
      <table className="stats fleet-accounts" data-testid="fleet-accounts">
        <thead>
          <tr>
            <th>account</th>
            <th>owner</th>
            <th>lease here</th>
          </tr>
        </thead>
        <tbody>
          {shown.slice(0, ACCOUNT_ROWS).map((a) => (
            <tr key={a.id} data-testid={'fleet-account-' + a.name}>
              <td title={a.id}>{a.name}</td>
              <td>
                {a.owner}
                {a.owner === data.self && <span className="muted"> (this one)</span>}
              </td>
              <td>{a.held ? `held, token ${a.token}` : data.ownership ? 'no' : '–'}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {shown.length > ACCOUNT_ROWS && (
        <p className="muted small" data-testid="fleet-more">
          {num(shown.length - ACCOUNT_ROWS)} more accounts: narrow them with the search.
        </p>
      )}
    </>
  )
}
