import { useState } from 'react'
import { api, ApiError } from '../api'
import { ago } from '../format'
import { usePoll } from '../usePoll'
import '../billing.css'

// The Registration page (docs/billing.md "Registration"): how users come to
// be (closed, invite, open) and the invitation codes. A new code is shown
// once, in a dialog, and only its SHA-256 is stored; a revoked code is
// disabled, kept with its uses.

interface Invitation {
  id: string
  prefix: string
  note: string
  max_uses: number
  uses: number
  disabled: boolean
  expires_at: string | null
  created_by: string
  created_at: string
}

const modes: [string, string][] = [
  ['closed', 'Closed: only operators create users'],
  ['invite', 'By invitation: a code is needed to register'],
  ['open', 'Open: anyone may register'],
]

const errText = (e: unknown) => (e instanceof ApiError && e.param ? `${e.param}: ${e.message}` : (e as Error).message)

/** invitationState is what an invitation's pill says at now (ms). */
export function invitationState(i: Invitation, now = Date.now()): string {
  if (i.disabled) return 'revoked'
  if (i.expires_at && Date.parse(i.expires_at) <= now) return 'expired'
  if (i.uses >= i.max_uses) return 'used'
  return 'active'
}

export function Registration() {
  const mode = usePoll(() => api<{ mode: string }>('GET', 'registration'), [])
  const inv = usePoll(() => api<{ invitations: Invitation[] }>('GET', 'invitations'), [], 30_000)
  const [msg, setMsg] = useState('')
  const [creating, setCreating] = useState(false)
  const [code, setCode] = useState<string | null>(null)
  const setMode = async (m: string) => {
    setMsg('')
    try {
      mode.setData(await api<{ mode: string }>('PUT', 'registration', { mode: m }))
    } catch (e) {
      setMsg(errText(e))
    }
  }
  const revoke = async (i: Invitation) => {
    setMsg('')
    if (!confirm(`Revoke invitation ${i.prefix}…? It cannot be used again.`)) return
    try {
      await api('DELETE', `invitations/${encodeURIComponent(i.id)}`)
      inv.reload()
    } catch (e) {
      setMsg(errText(e))
    }
  }
  const list = inv.data?.invitations ?? []
  return (
    <div>
      <div className="head">
        <h2>Registration</h2>
      </div>
      {(msg || mode.error || inv.error) && <div className="error">{msg || mode.error || inv.error}</div>}
      <div className="card" data-testid="registration-mode">
        <h3>Who may register</h3>
        <div className="modes" role="radiogroup" aria-label="Registration mode">
          {modes.map(([m, label]) => (
            <label key={m} className="check">
              <input type="radio" name="registration" value={m} checked={mode.data?.mode === m} onChange={() => setMode(m)} disabled={!mode.data} /> {label}
            </label>
          ))}
        </div>
        <p className="muted small">
          Users register in the console with their name or email and a password; with invitations, a code admits as many users as it has uses. The setting is{' '}
          <span className="mono">users.registration</span>.
        </p>
      </div>
      <div className="card">
        <div className="head">
          <h3>Invitation codes</h3>
          <div className="grow" />
          <button onClick={() => setCreating(true)}>Create invitation</button>
        </div>
        <table className="list" data-testid="invitations">
          <thead>
            <tr>
              <th>Code</th>
              <th>State</th>
              <th>Note</th>
              <th className="r">Uses</th>
              <th>Expires</th>
              <th>Created</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {list.map((i) => {
              const st = invitationState(i)
              return (
                <tr key={i.id} data-invitation={i.prefix}>
                  <td className="mono">{i.prefix}…</td>
                  <td>
                    <span className={'pill ' + (st === 'active' ? 'active' : st === 'revoked' ? 'disabled' : 'expired')}>{st}</span>
                  </td>
                  <td>{i.note || '–'}</td>
                  <td className="r">
                    {i.uses} of {i.max_uses}
                  </td>
                  <td>{i.expires_at ? ago(i.expires_at) : 'never'}</td>
                  <td title={i.created_by}>{ago(i.created_at)}</td>
                  <td className="actions">
                    {!i.disabled && (
                      <button className="danger" onClick={() => revoke(i)}>
                        Revoke
                      </button>
                    )}
                  </td>
                </tr>
              )
            })}
          </tbody>
        </table>
        {inv.data && list.length === 0 && <p className="muted">No invitations.</p>}
      </div>
      {creating && (
        <CreateInvitation
          onClose={() => setCreating(false)}
          onCreated={(c) => {
            setCreating(false)
            setCode(c)
            inv.reload()
          }}
        />
      )}
      {code && (
        <div className="modal">
          <div className="card form">
            <h3>Invitation created</h3>
            <p>Copy the code now: it is shown this once and only its hash is stored.</p>
            <code className="secret" data-testid="new-invitation">
              {code}
            </code>
            <div className="row">
              <button onClick={() => navigator.clipboard?.writeText(code)}>Copy</button>
              <button className="ghost" onClick={() => setCode(null)}>
                Done
              </button>
            </div>
          </div>
        </div>
      )}
    </div>
  )
}

function CreateInvitation({ onClose, onCreated }: { onClose: () => void; onCreated: (code: string) => void }) {
  const [v, setV] = useState({ max_uses: '1', note: '', expires_in_hours: '' })
  const [error, setError] = useState('')
  const set = (k: keyof typeof v) => (e: { target: { value: string } }) => setV({ ...v, [k]: e.target.value })
  const create = async () => {
    setError('')
    const uses = v.max_uses.trim() || '1'
    const hours = v.expires_in_hours.trim() || '0'
    if (!/^\d+$/.test(uses) || uses === '0') return setError('Uses is a whole number, at least 1.')
    if (!/^\d+$/.test(hours)) return setError('Expires in is a whole number of hours (empty: never).')
    try {
      const r = await api<{ code: string }>('POST', 'invitations', { max_uses: Number(uses), note: v.note.trim(), expires_in_hours: Number(hours) })
      onCreated(r.code)
    } catch (e) {
      setError(errText(e))
    }
  }
  return (
    <div className="modal">
      <div className="card form">
        <h3>Create invitation</h3>
        <div className="row">
          <label>
            Uses
            <input name="max_uses" value={v.max_uses} onChange={set('max_uses')} inputMode="numeric" />
          </label>
          <label>
            Expires in hours (empty: never)
            <input name="expires_in_hours" value={v.expires_in_hours} onChange={set('expires_in_hours')} inputMode="numeric" />
          </label>
        </div>
        <label>
          Note (who it is for)
          <input name="note" value={v.note} onChange={set('note')} autoFocus />
        </label>
        {error && <div className="error">{error}</div>}
        <div className="row">
          <button onClick={create}>Create</button>
          <button className="ghost" onClick={onClose}>
            Cancel
          </button>
        </div>
      </div>
    </div>
  )
}
