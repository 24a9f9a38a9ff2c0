import { useEffect, useState } from 'react'
import { api, ApiError } from '../api'
import { ago, num } from '../format'
import { navigate } from '../router'
import { usePoll } from '../usePoll'
import { PolicyEditor } from '../PolicyEditor'
import type { PolicyProblem } from '../lualint'

interface PolicyVersion {
  name: string
  version: number
  source?: string
  created_at: string
  activated_at?: string
  builtin?: boolean
}
interface PolicyList {
  policies: PolicyVersion[]
  builtins: string[]
  status: { ok: boolean; name: string; error: string; line: number; active: string; version: number; at: string }
}
interface SimResult {
  policy: string
  accounts: number
  tiers: Record<string, number>
  serving_tiers: Record<string, number>
  changed: number
  duration_ms: number
  top: { id: string; name: string; status: string; tier: string; score: number | null; serving_tier: string; serving_score: number | null }[]
  load: SimLoad | null
}

/** SimLoad is how a steady load spread over the pool under the policy (docs/admin-api.md). */
interface SimLoad {
  requests: number
  unserved: number
  accounts: number
  serving: number
  busiest: number
  busiest_share: number
  top1_accounts: number
  top1_share: number
  top1_even: number
  gini: number
  duration_ms: number
}

/** LoadSpread shows how evenly the simulated load spread, against an even spread. */
export function LoadSpread({ load }: { load: SimLoad }) {
  const share = (f: number) => `${(100 * f).toFixed(2)}%`
  return (
    <div data-testid="simulation-load">
      <h4>
        Spread of a steady load: {num(load.requests)} requests over {num(load.accounts)} enabled accounts ({load.duration_ms.toFixed(0)} ms)
      </h4>
      <table className="list small">
        <tbody>
          <tr>
            <td>busiest account</td>
            <td className="r" data-testid="load-busiest">
              {num(load.busiest)} requests, {share(load.busiest_share)}
            </td>
            <td className="muted">even: {load.accounts ? share(1 / load.accounts) : '–'}</td>
          </tr>
          <tr>
            <td>busiest 1 % ({num(load.top1_accounts)} accounts)</td>
            <td className="r">{share(load.top1_share)}</td>
            <td className="muted">even: {share(load.top1_even)}</td>
          </tr>
          <tr>
            <td>Gini coefficient</td>
            <td className="r" data-testid="load-gini">
              {load.gini.toFixed(2)}
            </td>
            <td className="muted">0: even, near 1: one account takes all</td>
          </tr>
          <tr>
            <td>accounts used</td>
            <td className="r">
              {num(load.serving)} of {num(load.accounts)}
            </td>
            <td className="muted">{load.unserved ? `${num(load.unserved)} requests got no account` : ''}</td>
          </tr>
        </tbody>
      </table>
    </div>
  )
}

const starter = `-- A routing policy: score(account, now) ranks accounts (docs/policies.md).
policy = { description = "prefer idle, healthy accounts" }

function score(a, now)
  if a.status ~= "active" then return nil end
  return 1 - a.inflight / a.max_inflight, "healthy"
end
`

/** problemOf turns an API error into the editor's problem (null when not a policy error). */
export function problemOf(e: unknown): PolicyProblem | null {
  if (e instanceof ApiError && e.code === 'policy_invalid') return { message: e.message, line: e.line }
  return null
}

export function Policies({ name, dark }: { name: string; dark: boolean }) {
  const { data: pl, reload } = usePoll(() => api<PolicyList>('GET', 'policies'), [], 10_000)
  const [current, setCurrent] = useState(name)
  const [source, setSource] = useState('')
  const [loaded, setLoaded] = useState('')
  const [problem, setProblem] = useState<PolicyProblem | null>(null)
  const [msg, setMsg] = useState('')
  const [sim, setSim] = useState<SimResult | null>(null)
  const [history, setHistory] = useState<PolicyVersion[]>([])
  const [newName, setNewName] = useState('')

  useEffect(() => setCurrent(name), [name])
  useEffect(() => {
    setProblem(null)
    setMsg('')
    setSim(null)
    if (!current) return
    api<PolicyVersion>('GET', `policies/${encodeURIComponent(current)}`)
      .then((p) => {
        setSource(p.source ?? '')
        setLoaded(p.source ?? '')
      })
      .catch((e) => {
        if (e instanceof ApiError && e.status === 404) {
          setSource(starter)
          setLoaded('')
        } else setMsg(e.message)
      })
    api<{ versions: PolicyVersion[] }>('GET', `policies/${encodeURIComponent(current)}/history`)
      .then((h) => setHistory(h.versions))
      .catch(() => setHistory([]))
  }, [current])

  const run = async (what: 'validate' | 'simulate' | 'save' | 'activate' | 'rollback', version?: number) => {
    setMsg('')
    setProblem(null)
    const p = encodeURIComponent(current)
    try {
      if (what === 'validate') {
        await api('POST', `policies/${p}/validate`, { source })
        setMsg('Valid: it compiles and passes its self-test on the live pool.')
      } else if (what === 'simulate') {
        setSim(await api<SimResult>('POST', `policies/${p}/simulate`, { source }))
      } else if (what === 'save') {
        const r = await api<PolicyVersion>('PUT', `policies/${p}`, { source })
        setLoaded(source)
        setMsg(`Saved as version ${r.version} (not serving yet).`)
      } else {
        const path = what === 'rollback' ? `policies/${p}/rollback` : `policies/${p}/activate`
        const r = await api<{ activated: PolicyVersion }>('POST', path, version ? { version } : undefined)
        setMsg(`Version ${r.activated.version} of ${r.activated.name} is serving.`)
      }
      const h = await api<{ versions: PolicyVersion[] }>('GET', `policies/${p}/history`).catch(() => ({ versions: [] }))
      setHistory(h.versions)
      reload()
    } catch (e) {
      const pr = problemOf(e)
      if (pr) setProblem(pr)
      else setMsg((e as Error).message)
    }
  }

  const open = (n: string) => navigate('policies', n)
  const st = pl?.status
  return (
    <div className="policies">
      <div className="head">
        <h2>Routing policies</h2>
        <div className="grow" />
        {st && (
          <span className={st.ok || !st.error ? 'muted' : 'error'} data-testid="reload-status">
            serving <b>{st.active || st.name}</b> {st.version ? `v${st.version}` : '(not stored)'}
            {st.error ? ` · last reload failed at line ${st.line}: ${st.error}` : ''}
          </span>
        )}
      </div>
      <div className="split">
        <div className="card side-list">
          <h4>Stored</h4>
          <ul className="plain">
            {(pl?.policies ?? []).map((p) => (
              <li key={p.name}>
                <a
                  href="#"
                  className={current === p.name ? 'active' : ''}
                  onClick={(e) => {
                    e.preventDefault()
                    open(p.name)
                  }}
                >
                  {p.name}
                </a>{' '}
                <span className="muted">v{p.version}</span>
              </li>
            ))}
          </ul>
          <h4>Built in</h4>
          <ul className="plain">
            {(pl?.builtins ?? []).map((b) => (
              <li key={b}>
                <a
                  href="#"
                  className={current === b ? 'active' : ''}
                  onClick={(e) => {
                    e.preventDefault()
                    open(b)
                  }}
                >
                  {b}
                </a>
              </li>
            ))}
          </ul>
          <h4>New</h4>
          <form
            onSubmit={(e) => {
              e.preventDefault()
              if (newName) open(newName)
            }}
          >
            <input placeholder="name" value={newName} onChange={(e) => setNewName(e.target.value)} name="new-policy" />
          </form>
        </div>
        <div className="editor-col">
          {!current && <p className="muted">Open a policy, or name a new one.</p>}
          {current && (
            <>
              <div className="row">
                <h3>{current}</h3>
                {source !== loaded && <span className="muted">(unsaved)</span>}
                <div className="grow" />
                <button onClick={() => run('validate')}>Validate</button>
                <button onClick={() => run('simulate')}>Simulate</button>
                <button onClick={() => run('save')}>Save</button>
                <button onClick={() => run('activate')} disabled={history.length === 0}>
                  Activate latest
                </button>
              </div>
              <PolicyEditor value={source} onChange={setSource} problem={problem} dark={dark} />
              {problem && (
                <div className="error" data-testid="policy-error" role="alert">
                  {problem.line ? `line ${problem.line}: ` : ''}
                  {problem.message}
                </div>
              )}
              {msg && (
                <div className="note" data-testid="policy-msg">
                  {msg}
                </div>
              )}
              {sim && <Simulation sim={sim} />}
              {history.length > 0 && (
                <div className="card">
                  <div className="row">
                    <h4>History</h4>
                    <div className="grow" />
                    <button onClick={() => run('rollback')}>Roll back</button>
                  </div>
                  <table className="list small">
                    <tbody>
                      {history.map((h) => (
                        <tr key={h.version}>
                          <td>v{h.version}</td>
                          <td className="muted">saved {ago(h.created_at)}</td>
                          <td className="muted">{h.activated_at ? `activated ${ago(h.activated_at)}` : ''}</td>
                          <td className="actions">
                            <button onClick={() => setSource(h.source ?? '')}>Load</button>
                            <button onClick={() => run('activate', h.version)}>Activate</button>
                          </td>
                        </tr>
                      ))}
                    </tbody>
                  </table>
                </div>
              )}
            </>
          )}
        </div>
      </div>
    </div>
  )
}

function Simulation({ sim }: { sim: SimResult }) {
  const tiers = ['healthy', 'warm', 'risky', 'excluded']
  return (
    <div className="card" data-testid="simulation">
      <h4>
        Simulation on the live pool: {num(sim.accounts)} accounts, {num(sim.changed)} change tier ({sim.duration_ms.toFixed(1)} ms)
      </h4>
      <table className="list small">
        <thead>
          <tr>
            <th />
            {tiers.map((t) => (
              <th key={t} className="r">
                {t}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          <tr>
            <td>this policy</td>
            {tiers.map((t) => (
              <td key={t} className="r">
                {num(sim.tiers[t])}
              </td>
            ))}
          </tr>
          <tr>
            <td>serving now</td>
            {tiers.map((t) => (
              <td key={t} className="r">
                {num(sim.serving_tiers[t])}
              </td>
            ))}
          </tr>
        </tbody>
      </table>
      {sim.load && <LoadSpread load={sim.load} />}
      <h4>Where traffic goes first</h4>
      <table className="list small">
        <tbody>
          {sim.top.map((a) => (
            <tr key={a.id}>
              <td>{a.name}</td>
              <td>
                <span className={'pill ' + a.tier}>{a.tier}</span> {a.score?.toFixed(2)}
              </td>
              <td className="muted">
                now {a.serving_tier || '–'} {a.serving_score?.toFixed(2)}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  )
}
