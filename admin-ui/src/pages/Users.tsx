import { useState } from 'react'
import { api, ApiError, query } from '../api'
import { ago, list, num } from '../format'
import { useLedgerPages } from '../ledger'
import { isAmount, isPositive, isSignedAmount, money, toMicro } from '../money'
import { usePoll } from '../usePoll'
import '../billing.css'

// The Users page (docs/billing.md, docs/admin-ui.md): users with their
// balances, searched by name or email; a user's panel tops up (or refunds,
// or adjusts) with a note, disables or enables, edits the allowlist and
// limits, and shows the ledger: the latest 50 rows, older ones 50 at a time
// (GET …/ledger with next_before). Amounts stay decimal strings end to end.
// The list is paged on the server (offset and limit, as for accounts),
// USERS_PAGE users a page.

/** User is a user as GET /api/admin/users answers it. */
export interface User {
  id: string
  name: string
  email: string
  group: string
  disabled: boolean
  models: string[]
  rpm: number
  max_concurrency: number
  has_password: boolean
  balance: string
  balance_micro: number
  created_at: string
  last_login_at: string | null
  /** version is the user's last write as read; a PATCH sends it back so that a change made since is a 409 edit_conflict, not overwritten. */
  version?: number
}

/** UserAnswer is GET /api/admin/users/{id} (and a change's answer): the user, its latest 50 ledger rows and their page's next_before. */
interface UserAnswer {
  user: User
  ledger: LedgerRow[]
  next_before: number | null
}

interface LedgerRow {
  id: number
  kind: string
  amount: string
  amount_micro: number
  actor: string
  note: string
  request_id: string
  created_at: string
}

// An edit_conflict (409: the user changed since it was read) says what to do in its message alone.
const errText = (e: unknown) => (e instanceof ApiError && e.param && e.code !== 'edit_conflict' ? `${e.param}: ${e.message}` : (e as Error).message)

/** USERS_PAGE is how many users one page of the list holds. */
const USERS_PAGE = 100

/** UsersPage is GET /api/admin/users: one page of the (filtered) users. */
type UsersPage = { total: number; pool: number; offset: number; limit: number; users: User[] }

export function Users() {
  const [q, setQ] = useState('')
  const [p, setP] = useState(0)
  const { data, error, reload } = usePoll(
    () => api<UsersPage>('GET', 'users' + query({ q, offset: p * USERS_PAGE, limit: USERS_PAGE })),
    [q, p],
    30_000,
  )
  const [open, setOpen] = useState<string | null>(null)
  const [creating, setCreating] = useState(false)
  const users = data?.users ?? []
  const total = data?.total ?? 0
  return (
    <div>
      <div className="head">
        <h2>Users</h2>
        <span className="muted" data-testid="users-count">
          {data ? `${total} ${total === 1 ? 'user' : 'users'}` : ''}
        </span>
        <div className="grow" />
        <input
          name="q"
          placeholder="search name or email"
          value={q}
          onChange={(e) => {
            setQ(e.target.value)
            setP(0)
          }}
        />
        <button onClick={() => setCreating(true)}>Create user</button>
      </div>
      {error && <div className="error">{error}</div>}
      <table className="list" data-testid="users-table">
        <thead>
          <tr>
            <th>Name</th>
            <th>Email</th>
            <th className="r">Balance</th>
            <th>State</th>
            <th>Group</th>
            <th>Models</th>
            <th className="r">RPM</th>
            <th className="r">Concurrency</th>
            <th>Last login</th>
          </tr>
        </thead>
        <tbody>
          {users.map((u) => (
            <tr key={u.id} data-user={u.name} className={'clickable' + (open === u.id ? ' sel' : '')} onClick={() => setOpen(u.id)}>
              <td>{u.name}</td>
              <td>{u.email || '–'}</td>
              <td className={'r mono' + (u.balance_micro < 0 ? ' bad' : '')} data-testid="balance">
                {money(u.balance)}
              </td>
              <td>
                <span className={'pill ' + (u.disabled ? 'disabled' : 'active')}>{u.disabled ? 'disabled' : 'active'}</span>
              </td>
              <td>{u.group || '–'}</td>
              <td>{u.models.length ? u.models.join(', ') : 'all priced'}</td>
              <td className="r">{u.rpm ? num(u.rpm) : '∞'}</td>
              <td className="r">{u.max_concurrency ? num(u.max_concurrency) : '∞'}</td>
              <td>{u.has_password ? ago(u.last_login_at) : <span className="muted">keys only</span>}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {data && total === 0 && <p className="muted">{q ? 'No user matches.' : 'No users yet.'}</p>}
      {total > USERS_PAGE && (
        <div className="head" data-testid="users-pages">
          <button className="ghost" disabled={p === 0} onClick={() => setP(p - 1)}>
            Previous
          </button>
          <span className="muted">
            {p * USERS_PAGE + 1}–{Math.min((p + 1) * USERS_PAGE, total)} of {total}
          </span>
          <button className="ghost" disabled={(p + 1) * USERS_PAGE >= total} onClick={() => setP(p + 1)}>
            Next
          </button>
        </div>
      )}
      {open && <UserPanel key={open} id={open} onClose={() => setOpen(null)} onChanged={reload} />}
      {creating && (
        <CreateUser
          onClose={() => setCreating(false)}
          onCreated={(u) => {
            setCreating(false)
            reload()
            setOpen(u.id)
          }}
        />
      )}
    </div>
  )
}

function UserPanel({ id, onClose, onChanged }: { id: string; onClose: () => void; onChanged: () => void }) {
  const { data, error, setData } = usePoll(() => api<UserAnswer>('GET', `users/${encodeURIComponent(id)}`), [id])
  const [msg, setMsg] = useState('')
  const ledger = useLedgerPages(data, (before) =>
    api<{ ledger: LedgerRow[]; next_before: number | null }>('GET', `users/${encodeURIComponent(id)}/ledger` + query({ limit: 50, before })),
  )
  if (!data) return <aside className="panel wide">{error ? <div className="error">{error}</div> : <p className="muted">Loading…</p>}</aside>
  const u = data.user
  const changed = (d: UserAnswer) => {
    setData(d)
    onChanged()
  }
  const toggle = async () => {
    setMsg('')
    if (!u.disabled && !confirm(`Disable ${u.name}? Its keys and console login are refused at once.`)) return
    try {
      // The version read, as every user edit sends it: a change made since is a 409 edit_conflict.
      const body = u.version !== undefined ? { disabled: !u.disabled, version: u.version } : { disabled: !u.disabled }
      changed(await api('PATCH', `users/${encodeURIComponent(u.id)}`, body))
    } catch (e) {
      setMsg(errText(e))
    }
  }
  return (
    <aside className="panel wide" data-testid="user-panel">
      <div className="head">
        <h3>{u.name}</h3>
        <span className={'pill ' + (u.disabled ? 'disabled' : 'active')} data-testid="user-state">
          {u.disabled ? 'disabled' : 'active'}
        </span>
        <div className="grow" />
        <button className={u.disabled ? '' : 'danger'} onClick={toggle}>
          {u.disabled ? 'Enable' : 'Disable'}
        </button>
        <button className="ghost" onClick={onClose} aria-label="Close">
          ✕
        </button>
      </div>
      <div className="counts wide">
        <div className={'count' + (u.balance_micro < 0 ? ' banned' : '')}>
          <b data-testid="user-balance">{money(u.balance)}</b>
          <span>balance</span>
        </div>
      </div>
      {(msg || error) && <div className="error">{msg || error}</div>}
      <LedgerForm user={u} onDone={changed} />
      <LimitsForm key={u.id + u.group + u.models.join() + u.rpm + u.max_concurrency} user={u} onDone={changed} />
      <h4>Ledger</h4>
      <table className="list small" data-testid="ledger">
        <thead>
          <tr>
            <th>Time</th>
            <th>Kind</th>
            <th className="r">Amount</th>
            <th>By</th>
            <th>Note</th>
          </tr>
        </thead>
        <tbody>
          {ledger.rows.map((r) => (
            <tr key={r.id} title={r.request_id ? 'request ' + r.request_id : undefined}>
              <td>{new Date(r.created_at).toLocaleString()}</td>
              <td>{r.kind}</td>
              <td className={'r mono ' + (r.amount_micro < 0 ? 'bad' : 'good')}>{(r.amount_micro > 0 ? '+' : '') + money(r.amount)}</td>
              <td>{r.actor}</td>
              <td className="wrap">{r.note || (r.request_id ? <span className="mono">{r.request_id}</span> : '')}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {ledger.rows.length === 0 && <p className="muted">No ledger rows.</p>}
      {ledger.error && <div className="error">{ledger.error}</div>}
      {ledger.before !== null && (
        <button className="ghost" onClick={ledger.loadOlder} disabled={ledger.busy} data-testid="ledger-older">
          Older rows
        </button>
      )}
    </aside>
  )
}

/** ledgerProblem says what is wrong with a ledger entry before it is sent, or '' when it may go. */
export function ledgerProblem(kind: string, amount: string, note: string): string {
  if (amount.trim() === '') return 'Enter an amount.'
  if (kind === 'adjustment') {
    if (!isSignedAmount(amount)) return 'The amount is a decimal with at most 6 digits after the point, e.g. -1.50.'
    if (toMicro(amount) === 0n) return 'An adjustment is not 0.'
  } else if (!isAmount(amount) || !isPositive(amount)) return 'The amount is a positive decimal with at most 6 digits after the point, e.g. 12.50.'
  if (note.trim() === '') return 'A note saying why is required; it is kept in the ledger.'
  return ''
}

function LedgerForm({ user, onDone }: { user: User; onDone: (d: UserAnswer) => void }) {
  const [v, setV] = useState({ kind: 'topup', amount: '', note: '', request_id: '' })
  const [error, setError] = useState('')
  const [busy, setBusy] = useState(false)
  const problem = ledgerProblem(v.kind, v.amount, v.note)
  const submit = async () => {
    setError('')
    if (problem) return setError(problem)
    setBusy(true)
    try {
      const body: Record<string, string> = { kind: v.kind, amount: v.amount.trim(), note: v.note.trim() }
      if (v.kind === 'refund' && v.request_id.trim()) body.request_id = v.request_id.trim()
      onDone(await api('POST', `users/${encodeURIComponent(user.id)}/ledger`, body))
      setV({ ...v, amount: '', note: '', request_id: '' })
    } catch (e) {
      setError(errText(e))
    } finally {
      setBusy(false)
    }
  }
  return (
    <div className="card form" data-testid="ledger-form">
      <h4>Top up</h4>
      <div className="row">
        <label>
          Kind
          <select name="kind" value={v.kind} onChange={(e) => setV({ ...v, kind: e.target.value })}>
            <option value="topup">top-up</option>
            <option value="refund">refund</option>
            <option value="adjustment">adjustment (±)</option>
          </select>
        </label>
        <label>
          Amount
          <input name="amount" value={v.amount} onChange={(e) => setV({ ...v, amount: e.target.value })} inputMode="decimal" placeholder="12.50" />
        </label>
      </div>
      <label>
        Note (required)
        <input name="note" value={v.note} onChange={(e) => setV({ ...v, note: e.target.value })} placeholder="invoice 2026-114" />
      </label>
      {v.kind === 'refund' && (
        <label>
          Request id refunded (optional)
          <input name="request_id" value={v.request_id} onChange={(e) => setV({ ...v, request_id: e.target.value })} />
        </label>
      )}
      {error && <div className="error">{error}</div>}
      <button onClick={submit} disabled={busy}>
        {v.kind === 'topup' ? 'Top up' : v.kind === 'refund' ? 'Refund' : 'Adjust'}
      </button>
    </div>
  )
}

/** limitsBody is the PATCH of a user's group, allowlist and limits from the form's strings; a string is an error. */
export function limitsBody(v: { group: string; models: string; rpm: string; max_concurrency: string }): Record<string, unknown> | string {
  const int = (s: string, what: string) => {
    const t = s.trim()
    if (t === '' || t === '∞') return 0
    if (!/^\d+$/.test(t)) return `${what} is a whole number (empty: no limit).`
    return Number(t)
  }
  const rpm = int(v.rpm, 'Requests/min')
  if (typeof rpm === 'string') return rpm
  const conc = int(v.max_concurrency, 'Concurrency')
  if (typeof conc === 'string') return conc
  return { group: v.group.trim(), models: list(v.models), rpm, max_concurrency: conc }
}

function LimitsForm({ user, onDone }: { user: User; onDone: (d: UserAnswer) => void }) {
  const initial = { group: user.group, models: user.models.join(', '), rpm: user.rpm ? String(user.rpm) : '', max_concurrency: user.max_concurrency ? String(user.max_concurrency) : '' }
  const [v, setV] = useState(initial)
  const [msg, setMsg] = useState('')
  const set = (k: keyof typeof v) => (e: { target: { value: string } }) => setV({ ...v, [k]: e.target.value })
  const dirty = JSON.stringify(v) !== JSON.stringify(initial)
  const save = async () => {
    setMsg('')
    const body = limitsBody(v)
    if (typeof body === 'string') return setMsg(body)
    try {
      onDone(await api('PATCH', `users/${encodeURIComponent(user.id)}`, user.version !== undefined ? { ...body, version: user.version } : body))
    } catch (e) {
      setMsg(errText(e))
    }
  }
  return (
    <div className="card form" data-testid="limits-form">
      <h4>Access and limits</h4>
      <LimitsFields v={v} set={set} />
      {msg && <div className="error">{msg}</div>}
      <button onClick={save} disabled={!dirty}>
        Save
      </button>
    </div>
  )
}

/** The fields of a user's access and limits, in the limits form and in Create user. */
type LimitsDraft = { group: string; rpm: string; max_concurrency: string; models: string }

/** LimitsFields renders a user's price group, RPM, concurrency and model allowlist inputs. */
function LimitsFields({ v, set }: { v: LimitsDraft; set: (k: keyof LimitsDraft) => (e: { target: { value: string } }) => void }) {
  return (
    <>
      <div className="row">
        <label>
          Price group
          <input name="group" value={v.group} onChange={set('group')} placeholder="none (×1)" />
        </label>
        <label>
          Requests/min
          <input name="rpm" value={v.rpm} onChange={set('rpm')} inputMode="numeric" placeholder="∞" />
        </label>
        <label>
          Concurrency
          <input name="max_concurrency" value={v.max_concurrency} onChange={set('max_concurrency')} inputMode="numeric" placeholder="∞" />
        </label>
      </div>
      <label>
        Model allowlist (comma-separated; empty: every priced model)
        <input name="models" value={v.models} onChange={set('models')} />
      </label>
    </>
  )
}

function CreateUser({ onClose, onCreated }: { onClose: () => void; onCreated: (u: User) => void }) {
  const [v, setV] = useState({ name: '', email: '', password: '', group: '', models: '', rpm: '', max_concurrency: '', balance: '' })
  const [error, setError] = useState('')
  const set = (k: keyof typeof v) => (e: { target: { value: string } }) => setV({ ...v, [k]: e.target.value })
  const create = async () => {
    setError('')
    const lim = limitsBody(v)
    if (typeof lim === 'string') return setError(lim)
    if (v.balance.trim() && !isAmount(v.balance)) return setError('The starting balance is a decimal with at most 6 digits after the point, e.g. 10.00.')
    const body: Record<string, unknown> = { ...lim, name: v.name.trim() }
    if (v.email.trim()) body.email = v.email.trim()
    if (v.password) body.password = v.password
    if (v.balance.trim()) body.balance = v.balance.trim()
    try {
      onCreated(await api<User>('POST', 'users', body))
    } catch (e) {
      setError(errText(e))
    }
  }
  return (
    <div className="modal">
      <div className="card form">
        <h3>Create user</h3>
        <div className="row">
          <label>
            Name
            <input name="name" value={v.name} onChange={set('name')} autoFocus />
          </label>
          <label>
            Email (optional)
            <input name="email" value={v.email} onChange={set('email')} />
          </label>
        </div>
        <div className="row">
          <label>
            Console password (empty: keys only)
            <input name="password" type="password" value={v.password} onChange={set('password')} autoComplete="new-password" />
          </label>
          <label>
            Starting balance
            <input name="balance" value={v.balance} onChange={set('balance')} inputMode="decimal" placeholder="0.00" />
          </label>
        </div>
        <LimitsFields v={v} set={set} />
        {error && <div className="error">{error}</div>}
        <div className="row">
          <button onClick={create} disabled={!v.name.trim()}>
            Create
          </button>
          <button className="ghost" onClick={onClose}>
            Cancel
          </button>
        </div>
      </div>
    </div>
  )
}
