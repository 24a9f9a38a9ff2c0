import { useState } from 'react'
import { ApiError } from '../../api'
import { ago, list, num } from '../../format'
import { usePoll } from '../../usePoll'
import { consoleApi, type ConsoleUser } from '../api'
import { SecretOnce } from '../../SecretOnce'

/** One of the user's keys as GET /api/console/keys lists it (never the secret). */
export interface ConsoleKey {
  id: string
  name: string
  prefix: string
  models: string[]
  disabled: boolean
  expires_at: string | null
  created_at: string
  limits: { rpm: number; rpd: number; tokens_per_day: number }
  state: string
}

/** KeyDraft is the create form's text as typed. */
export interface KeyDraft {
  name: string
  models: string
  rpm: string
  rpd: string
  tokens_per_day: string
  expires_in: string
}

/**
 * keyBody turns the form into the body of POST /api/console/keys, or the
 * reason it cannot: limits are whole numbers (empty: none), the expiry a
 * count of days (empty: never), models a comma-separated list.
 */
export function keyBody(d: KeyDraft): { body: Record<string, unknown> } | { error: string } {
  const body: Record<string, unknown> = { name: d.name.trim() }
  if (!body.name) return { error: 'A key needs a name.' }
  const models = list(d.models)
  if (models.length) body.models = models
  const limits: Record<string, number> = {}
  for (const k of ['rpm', 'rpd', 'tokens_per_day'] as const) {
    const v = d[k].trim()
    if (!v) continue
    if (!/^\d+$/.test(v)) return { error: `${labels[k]} is a whole number (empty: no limit).` }
    limits[k] = Number(v)
  }
  if (Object.keys(limits).length) body.limits = { rpm: 0, rpd: 0, tokens_per_day: 0, ...limits }
  const days = d.expires_in.trim()
  if (days) {
    if (!/^\d+$/.test(days) || Number(days) < 1) return { error: 'Expires in is a whole number of days (empty: never).' }
    body.expires_in = `${Number(days) * 24}h`
  }
  return { body }
}

const labels = { rpm: 'Requests/min', rpd: 'Requests/day', tokens_per_day: 'Tokens/day' }
const emptyDraft: KeyDraft = { name: '', models: '', rpm: '', rpd: '', tokens_per_day: '', expires_in: '' }

/** ConsoleKeys lists the user's own keys; creates one (its secret shown once, with a copy button) and revokes. */
export function ConsoleKeys({ user }: { user: ConsoleUser }) {
  const { data, error, reload } = usePoll(() => consoleApi<{ keys: ConsoleKey[] }>('GET', 'keys'), [])
  const [creating, setCreating] = useState(false)
  const [secret, setSecret] = useState<{ name: string; secret: string } | null>(null)
  const [msg, setMsg] = useState('')
  const revoke = async (k: ConsoleKey) => {
    setMsg('')
    if (!confirm(`Revoke key ${k.name}? Clients using it are refused at once.`)) return
    try {
      await consoleApi('DELETE', `keys/${encodeURIComponent(k.id)}`)
      reload()
    } catch (e) {
      setMsg((e as Error).message)
    }
  }
  const lim = (n: number) => (n ? num(n, true) : '–')
  const keys = data?.keys ?? []
  return (
    <div>
      <div className="head">
        <h2>API keys</h2>
        <div className="grow" />
        <button onClick={() => setCreating(true)}>Create key</button>
      </div>
      <p className="muted small">
        Use a key as <span className="mono">Authorization: Bearer sk-troupe-…</span> against this gateway's <span className="mono">/v1</span>. Its requests are paid from your balance.
        {user.models.length > 0 && <> Your account may use: {user.models.join(', ')}.</>}
      </p>
      {(error || msg) && <div className="error">{error || msg}</div>}
      <table className="list">
        <thead>
          <tr>
            <th>Name</th>
            <th>Prefix</th>
            <th>State</th>
            <th>Models</th>
            <th className="r">Req/min</th>
            <th className="r">Req/day</th>
            <th className="r">Tokens/day</th>
            <th>Expires</th>
            <th>Created</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {keys.map((k) => (
            <tr key={k.id} data-key={k.name}>
              <td>{k.name}</td>
              <td className="mono">{k.prefix}…</td>
              <td>
                <span className={'pill ' + k.state}>{k.state}</span>
              </td>
              <td>{k.models.length ? k.models.join(', ') : 'all yours'}</td>
              <td className="r">{lim(k.limits?.rpm)}</td>
              <td className="r">{lim(k.limits?.rpd)}</td>
              <td className="r">{lim(k.limits?.tokens_per_day)}</td>
              <td>{k.expires_at ? ago(k.expires_at) : 'never'}</td>
              <td>{ago(k.created_at)}</td>
              <td className="actions">
                <button className="danger" onClick={() => revoke(k)}>
                  Revoke
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {data && keys.length === 0 && <p className="muted">No keys yet: create one to call the API.</p>}
      {creating && (
        <KeyForm
          onClose={() => setCreating(false)}
          onCreated={(name, s) => {
            setCreating(false)
            setSecret({ name, secret: s })
            reload()
          }}
        />
      )}
      {secret && <SecretOnce name={secret.name} secret={secret.secret} onDone={() => setSecret(null)} />}
    </div>
  )
}

function KeyForm({ onClose, onCreated }: { onClose: () => void; onCreated: (name: string, secret: string) => void }) {
  const [v, setV] = useState<KeyDraft>(emptyDraft)
  const [error, setError] = useState('')
  const [busy, setBusy] = useState(false)
  const set = (k: keyof KeyDraft) => (e: { target: { value: string } }) => setV({ ...v, [k]: e.target.value })
  const create = async () => {
    const b = keyBody(v)
    if ('error' in b) {
      setError(b.error)
      return
    }
    setBusy(true)
    try {
      const r = await consoleApi<{ secret: string; key: ConsoleKey }>('POST', 'keys', b.body)
      onCreated(r.key.name, r.secret)
    } catch (e) {
      setError(e instanceof ApiError && e.param && e.param !== 'body' ? `${e.param}: ${e.message}` : (e as Error).message)
    } finally {
      setBusy(false)
    }
  }
  return (
    <div className="modal">
      <div className="card form">
        <h3>Create API key</h3>
        <label>
          Name
          <input value={v.name} onChange={set('name')} name="name" autoFocus maxLength={64} />
        </label>
        <label>
          Model allowlist (comma-separated; empty: every model you may use)
          <input value={v.models} onChange={set('models')} name="models" />
        </label>
        <div className="row">
          <label>
            {labels.rpm}
            <input value={v.rpm} onChange={set('rpm')} inputMode="numeric" name="rpm" placeholder="no limit" />
          </label>
          <label>
            {labels.rpd}
            <input value={v.rpd} onChange={set('rpd')} inputMode="numeric" name="rpd" placeholder="no limit" />
          </label>
          <label>
            {labels.tokens_per_day}
            <input value={v.tokens_per_day} onChange={set('tokens_per_day')} inputMode="numeric" name="tokens_per_day" placeholder="no limit" />
          </label>
        </div>
        <label>
          Expires in (days; empty: never)
          <input value={v.expires_in} onChange={set('expires_in')} inputMode="numeric" name="expires_in" />
        </label>
        {error && (
          <div className="error" role="alert">
            {error}
          </div>
        )}
        <div className="row">
          <button onClick={create} disabled={!v.name.trim() || busy}>
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
