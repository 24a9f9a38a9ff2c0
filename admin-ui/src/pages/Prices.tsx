import { useState } from 'react'
import { api, ApiError } from '../api'
import { ago } from '../format'
import { defaultCacheWrite, fromMicro, isAmount, isPositive, money, toMicro } from '../money'
import { usePoll } from '../usePoll'
import '../billing.css'

// The Prices page (docs/billing.md "Prices"): each model's price per million
// tokens for input, cached input, cache writes and output, and the user
// groups' multipliers. Prices are typed and sent as decimal strings exactly
// as the operator wrote them; the server reads them digit by digit.

interface Price {
  model: string
  currency: string
  input: string
  cached_input: string
  cache_write: string
  output: string
  updated_at: string
}

interface PriceGroup {
  group: string
  multiplier: string
}

/** multiplier writes a group's multiplier without trailing zeros: "0.800000" → "0.8". */
const multiplier = (s: string) => {
  const v = toMicro(s)
  return v === null ? '–' : fromMicro(v, 0)
}

const errText = (e: unknown) => (e instanceof ApiError && e.param ? `${e.param}: ${e.message}` : (e as Error).message)

/** PriceForm is what the price form holds: strings, as typed. */
export interface PriceForm {
  model: string
  input: string
  cached_input: string
  cache_write: string
  output: string
}

/** priceBody is the PUT body of a price form, or a string saying what is wrong. Empty optional prices are left to the server's defaults. */
export function priceBody(v: PriceForm): Record<string, string> | string {
  if (!v.model.trim()) return 'Name the model, as clients name it.'
  const body: Record<string, string> = {}
  for (const [k, label, required] of [
    ['input', 'Input', true],
    ['output', 'Output', true],
    ['cached_input', 'Cached input', false],
    ['cache_write', 'Cache write', false],
  ] as const) {
    const s = v[k].trim()
    if (!s) {
      if (required) return `${label} price is required.`
      continue
    }
    if (!isAmount(s)) return `${label} price is a decimal with at most 6 digits after the point, e.g. 1.25.`
    body[k] = s
  }
  return body
}

export function Prices() {
  const { data, error, reload } = usePoll(() => api<{ prices: Price[] }>('GET', 'prices'), [])
  const groups = usePoll(() => api<{ price_groups: PriceGroup[] }>('GET', 'price-groups'), [])
  const [editing, setEditing] = useState<PriceForm | null>(null)
  const [msg, setMsg] = useState('')
  const remove = async (p: Price) => {
    setMsg('')
    if (!confirm(`Remove the price of ${p.model}? Users are then refused that model (403) until it has a price again.`)) return
    try {
      await api('DELETE', `prices/${encodeURIComponent(p.model)}`)
      reload()
    } catch (e) {
      setMsg(errText(e))
    }
  }
  const prices = data?.prices ?? []
  return (
    <div>
      <div className="head">
        <h2>Prices</h2>
        <span className="muted">per million tokens</span>
        <div className="grow" />
        <button onClick={() => setEditing({ model: '', input: '', cached_input: '', cache_write: '', output: '' })}>Set price</button>
      </div>
      {(error || msg) && <div className="error">{error || msg}</div>}
      <table className="list" data-testid="prices-table">
        <thead>
          <tr>
            <th>Model</th>
            <th className="r">Input</th>
            <th className="r">Cached input</th>
            <th className="r">Cache write</th>
            <th className="r">Output</th>
            <th>Currency</th>
            <th>Updated</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {prices.map((p) => (
            <tr key={p.model} data-price={p.model}>
              <td>{p.model}</td>
              <td className="r mono" data-testid="price-input">
                {money(p.input)}
              </td>
              <td className="r mono">{money(p.cached_input)}</td>
              <td className="r mono">{money(p.cache_write)}</td>
              <td className="r mono" data-testid="price-output">
                {money(p.output)}
              </td>
              <td>{p.currency}</td>
              <td>{ago(p.updated_at)}</td>
              <td className="actions">
                <button onClick={() => setEditing({ model: p.model, input: money(p.input), cached_input: money(p.cached_input), cache_write: money(p.cache_write), output: money(p.output) })}>
                  Edit
                </button>
                <button className="danger" onClick={() => remove(p)}>
                  Remove
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {data && prices.length === 0 && <p className="muted">No prices: users' keys are refused every model until it has one.</p>}
      <Groups data={groups.data?.price_groups ?? null} error={groups.error} reload={groups.reload} />
      {editing && (
        <PriceEditor
          initial={editing}
          onClose={() => setEditing(null)}
          onSaved={() => {
            setEditing(null)
            reload()
          }}
        />
      )}
    </div>
  )
}

function PriceEditor({ initial, onClose, onSaved }: { initial: PriceForm; onClose: () => void; onSaved: () => void }) {
  const [v, setV] = useState(initial)
  const [error, setError] = useState('')
  const set = (k: keyof PriceForm) => (e: { target: { value: string } }) => setV({ ...v, [k]: e.target.value })
  const editing = initial.model !== ''
  const save = async () => {
    setError('')
    const body = priceBody(v)
    if (typeof body === 'string') return setError(body)
    try {
      await api('PUT', `prices/${encodeURIComponent(v.model.trim())}`, body)
      onSaved()
    } catch (e) {
      setError(errText(e))
    }
  }
  const cw = defaultCacheWrite(v.input)
  return (
    <div className="modal">
      <div className="card form" data-testid="price-form">
        <h3>{editing ? `Price of ${initial.model}` : 'Set a price'}</h3>
        <label>
          Model (as clients name it)
          <input name="model" value={v.model} onChange={set('model')} disabled={editing} autoFocus={!editing} />
        </label>
        <p className="muted small">Per million tokens, in the currency (decimals, at most 6 digits after the point).</p>
        <div className="row">
          <label>
            Input
            <input name="input" value={v.input} onChange={set('input')} inputMode="decimal" placeholder="1.25" autoFocus={editing} />
          </label>
          <label>
            Output
            <input name="output" value={v.output} onChange={set('output')} inputMode="decimal" placeholder="10.00" />
          </label>
        </div>
        <div className="row">
          <label>
            Cached input
            <input name="cached_input" value={v.cached_input} onChange={set('cached_input')} inputMode="decimal" placeholder={isAmount(v.input) ? `${money(v.input)} (= input)` : '= input'} />
          </label>
          <label>
            Cache write
            <input name="cache_write" value={v.cache_write} onChange={set('cache_write')} inputMode="decimal" placeholder={cw ? `${cw} (input × 1.25)` : 'input × 1.25'} />
          </label>
        </div>
        {error && <div className="error">{error}</div>}
        <div className="row">
          <button onClick={save}>Save</button>
          <button className="ghost" onClick={onClose}>
            Cancel
          </button>
        </div>
      </div>
    </div>
  )
}

function Groups({ data, error, reload }: { data: PriceGroup[] | null; error: string; reload: () => void }) {
  const [v, setV] = useState({ group: '', multiplier: '' })
  const [msg, setMsg] = useState('')
  const save = async () => {
    setMsg('')
    const m = v.multiplier.trim()
    if (!v.group.trim()) return setMsg('Name the group (a user’s price group).')
    if (!isAmount(m) || !isPositive(m)) return setMsg('The multiplier is a decimal above 0 with at most 6 digits after the point, e.g. 0.8.')
    try {
      await api('PUT', `price-groups/${encodeURIComponent(v.group.trim())}`, { multiplier: m })
      setV({ group: '', multiplier: '' })
      reload()
    } catch (e) {
      setMsg(errText(e))
    }
  }
  const remove = async (g: PriceGroup) => {
    setMsg('')
    try {
      await api('DELETE', `price-groups/${encodeURIComponent(g.group)}`)
      reload()
    } catch (e) {
      setMsg(errText(e))
    }
  }
  return (
    <div className="card spaced">
      <h3>Group multipliers</h3>
      <p className="muted small">A user in a group pays every price × its multiplier; a group without one pays × 1.</p>
      {(error || msg) && <div className="error">{error || msg}</div>}
      <table className="list" data-testid="price-groups">
        <thead>
          <tr>
            <th>Group</th>
            <th className="r">Multiplier</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {(data ?? []).map((g) => (
            <tr key={g.group} data-group={g.group}>
              <td>{g.group}</td>
              <td className="r mono">× {multiplier(g.multiplier)}</td>
              <td className="actions">
                <button onClick={() => setV({ group: g.group, multiplier: money(g.multiplier) })}>Edit</button>
                <button className="danger" onClick={() => remove(g)}>
                  Remove
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {data && data.length === 0 && <p className="muted">No group multipliers.</p>}
      <div className="row">
        <input name="price-group" placeholder="group" value={v.group} onChange={(e) => setV({ ...v, group: e.target.value })} />
        <input name="multiplier" placeholder="multiplier, e.g. 0.8" value={v.multiplier} onChange={(e) => setV({ ...v, multiplier: e.target.value })} inputMode="decimal" />
        <button onClick={save}>Set multiplier</button>
      </div>
    </div>
  )
}
