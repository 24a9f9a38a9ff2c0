import { useState } from 'react'
import { api, ApiError, editConflictText } from '../api'
import { ago, list, num } from '../format'
import { usePoll } from '../usePoll'
import { SecretOnce } from '../SecretOnce'

interface Key {
  id: string
  name: string
  prefix: string
  group: string
  models: string[]
  disabled: boolean
  expires_at: string | null
  created_at: string
  limits: { rpm: number; rpd: number; tokens_per_day: number }
  admin: boolean
  state: string
  /** version is the key's revision as read; enable and disable send it back (PATCH) so that a change made since is a 409 edit_conflict, not overwritten. */
  version?: number
}

export function Keys() {
  const { data, error, reload } = usePoll(() => api<{ keys: Key[] }>('GET', 'keys'), [])
  const [creating, setCreating] = useState(false)
  const [secret, setSecret] = useState<{ name: string; secret: string } | null>(null)
  const [msg, setMsg] = useState('')
  const act = async (k: Key, what: string) => {
    setMsg('')
    try {
      if (what === 'delete') {
        if (!confirm(`Delete key ${k.name}? Clients using it get 401 at once.`)) return
        await api('DELETE', `keys/${encodeURIComponent(k.id)}`)
      } else {
        // Enable and disable are edits of the key as shown: a PATCH with the version read.
        const body: Record<string, unknown> = { disabled: what === 'disable' }
        if (k.version !== undefined) body.version = k.version
        await api('PATCH', `keys/${encodeURIComponent(k.id)}`, body)
      }
      reload()
    } catch (e) {
      const conflict = editConflictText(e)
      setMsg(conflict || (e as Error).message)
      if (conflict) reload() // show the key as it is now
    }
  }
  const lim = (n: number) => (n ? num(n, true) : '∞')
  return (
    <div>
      <div className="head">
        <h2>API keys</h2>
        <div className="grow" />
        <button onClick={() => setCreating(true)}>Create key</button>
      </div>
      {(error || msg) && <div className="error">{error || msg}</div>}
      <table className="list">
        <thead>
          <tr>
            <th>Name</th>
            <th>Prefix</th>
            <th>State</th>
            <th>Group</th>
            <th>Models</th>
            <th className="r">RPM</th>
            <th className="r">RPD</th>
            <th className="r">Tokens/day</th>
            <th>Expires</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {(data?.keys ?? []).map((k) => (
            <tr key={k.id} data-key={k.name}>
              <td>
                {k.name} {k.admin && <span className="tag">admin</span>}
              </td>
              <td className="mono">{k.prefix}…</td>
              <td>
                <span className={'pill ' + k.state}>{k.state}</span>
              </td>
              <td>{k.group || '–'}</td>
              <td>{k.models.length ? k.models.join(', ') : 'all'}</td>
              <td className="r">{lim(k.limits.rpm)}</td>
              <td className="r">{lim(k.limits.rpd)}</td>
              <td className="r">{lim(k.limits.tokens_per_day)}</td>
              <td>{k.expires_at ? ago(k.expires_at) : 'never'}</td>
              <td className="actions">
                {k.disabled ? <button onClick={() => act(k, 'enable')}>Enable</button> : <button onClick={() => act(k, 'disable')}>Disable</button>}
                <button className="danger" onClick={() => act(k, 'delete')}>
                  Delete
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
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
  const [v, setV] = useState({ name: '', group: '', models: '', rpm: '', rpd: '', tokens_per_day: '', expires_in: '', admin: false })
  const [error, setError] = useState('')
  const set = (k: keyof typeof v) => (e: { target: { value: string } }) => setV({ ...v, [k]: e.target.value })
  const create = async () => {
    const body: Record<string, unknown> = {
      name: v.name,
      group: v.group,
      models: list(v.models),
      limits: { rpm: Number(v.rpm) || 0, rpd: Number(v.rpd) || 0, tokens_per_day: Number(v.tokens_per_day) || 0 },
      admin: v.admin,
    }
    if (v.expires_in) body.expires_in = v.expires_in
    try {
      const r = await api<{ secret: string; key: Key }>('POST', 'keys', body)
      onCreated(r.key.name, r.secret)
    } catch (e) {
      setError(e instanceof ApiError && e.param ? `${e.param}: ${e.message}` : (e as Error).message)
    }
  }
  return (
    <div className="modal">
      <div className="card form">
        <h3>Create API key</h3>
        <label>
          Name
          <input value={v.name} onChange={set('name')} name="name" autoFocus />
        </label>
        <div className="row">
          <label>
            Group
            <input value={v.group} onChange={set('group')} name="group" />
          </label>
          <label>
            Model allowlist (comma-separated; empty: all)
            <input value={v.models} onChange={set('models')} name="models" />
          </label>
        </div>
        <div className="row">
          <label>
            Requests/min
            <input value={v.rpm} onChange={set('rpm')} inputMode="numeric" name="rpm" placeholder="∞" />
          </label>
          <label>
            Requests/day
            <input value={v.rpd} onChange={set('rpd')} inputMode="numeric" name="rpd" placeholder="∞" />
          </label>
          <label>
            Tokens/day
            <input value={v.tokens_per_day} onChange={set('tokens_per_day')} inputMode="numeric" name="tokens_per_day" placeholder="∞" />
          </label>
        </div>
        <label>
          Expires in (e.g. 720h; empty: never)
          <input value={v.expires_in} onChange={set('expires_in')} name="expires_in" />
        </label>
        <label className="check">
          <input type="checkbox" checked={v.admin} onChange={(e) => setV({ ...v, admin: e.target.checked })} /> Admin key (may use this admin API)
        </label>
        {error && <div className="error">{error}</div>}
        <div className="row">
          <button onClick={create} disabled={!v.name}>
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
