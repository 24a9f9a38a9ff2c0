import { useState } from 'react'
import { api } from '../api'
import { HygieneRule, type HygieneAnswer } from '../HygieneRule'
import { usePoll } from '../usePoll'

interface Setting {
  key: string
  value: string
  default: string
  description: string
  set: boolean
}

export function Settings() {
  const { data, reload } = usePoll(() => api<{ settings: Setting[]; instance: Record<string, unknown> }>('GET', 'settings'), [])
  const { data: hygiene } = usePoll(() => api<HygieneAnswer>('GET', 'hygiene'), [], 10000)
  const [edits, setEdits] = useState<Record<string, string>>({})
  const [msg, setMsg] = useState('')
  const save = async () => {
    setMsg('')
    try {
      await api('PUT', 'settings', { settings: edits })
      setEdits({})
      setMsg('Saved.')
      reload()
    } catch (e) {
      setMsg((e as Error).message)
    }
  }
  return (
    <div>
      <h2>Settings</h2>
      <div className="grid">
        <div className="card">
          <h3>Retention</h3>
          {(data?.settings ?? []).map((s) => (
            <label key={s.key}>
              {s.description} <span className="muted mono">{s.key}</span>
              <input value={edits[s.key] ?? s.value} onChange={(e) => setEdits({ ...edits, [s.key]: e.target.value })} inputMode="numeric" name={s.key} />
              <span className="muted small">default {s.default}</span>
            </label>
          ))}
          {msg && <div className="note">{msg}</div>}
          <button onClick={save} disabled={Object.keys(edits).length === 0}>
            Save
          </button>
        </div>
        <div className="card">
          <h3>This instance</h3>
          <dl>
            {Object.entries(data?.instance ?? {}).map(([k, v]) => (
              <div key={k}>
                <dt>{k}</dt>
                <dd className="mono">{String(v)}</dd>
              </div>
            ))}
          </dl>
        </div>
        {hygiene && <HygieneRule data={hygiene} />}
        <Password />
      </div>
    </div>
  )
}

function Password() {
  const [cur, setCur] = useState('')
  const [next, setNext] = useState('')
  const [msg, setMsg] = useState('')
  const change = async () => {
    setMsg('')
    try {
      await api('PUT', 'me/password', { current_password: cur, new_password: next })
      window.location.reload() // every session ended: log in again
    } catch (e) {
      setMsg((e as Error).message)
    }
  }
  return (
    <div className="card">
      <h3>Change password</h3>
      <label>
        Current password
        <input type="password" value={cur} onChange={(e) => setCur(e.target.value)} autoComplete="current-password" />
      </label>
      <label>
        New password (12+ characters)
        <input type="password" value={next} onChange={(e) => setNext(e.target.value)} autoComplete="new-password" />
      </label>
      {msg && <div className="error">{msg}</div>}
      <button onClick={change} disabled={!cur || next.length < 12}>
        Change
      </button>
    </div>
  )
}
