import { useCallback, useEffect, useRef, useState } from 'react'
import { useVirtualizer } from '@tanstack/react-virtual'
import { api, ApiError, query } from '../api'
import { list, ms, num, pct, seconds } from '../format'
import { navigate } from '../router'

export interface Account {
  id: string
  name: string
  provider: string
  base_url: string
  models: string[]
  max_concurrency: number
  group: string
  tags: string[]
  priority: number
  disabled: boolean
  credentials: Record<string, boolean>
  /** version is the account's version as read; a PATCH sends it back so that a change made since (another admin, instance, a token refresh) is a 409 edit_conflict, not overwritten. */
  version?: number
  live: {
    status: string
    inflight: number
    max_inflight: number
    cooldown_reason: string
    cooldown_remaining_seconds: number
    tier: string
    score: number | null
    requests: number
    failures: number
    ewma_success: number
    ewma_latency_ms: number
    usage_windows: { name: string; used_percent: number }[]
    // Per-model limits (Codex x-codex-<family>-*): cooling_until is set while one is used up.
    limit_families?: { id: string; limit_name: string; cooling_until: string | null }[]
  }
  /** the last hour's upstream attempts (GET /api/admin/accounts); absent without any */
  stats_1h?: { requests: number; success_rate: number; latency_p95_ms: number }
  /** why the account hygiene rule flagged or disabled it (docs/admin-api.md#account-hygiene); absent when it did not */
  hygiene?: Hygiene
}

/** An account hygiene flag (GET /api/admin/hygiene, and on the account). */
export interface Hygiene {
  action: 'flag' | 'disable'
  kind: 'unauthorized' | 'rate_limited'
  reason: string
  since: string
  at: string
}

interface Page {
  total: number
  pool: number
  accounts: Account[]
}

const PAGE = 100
const ROW = 36

interface Filters {
  q: string
  status: string
  tier: string
  provider: string
  group: string
  sort: string
  order: string
}

/** windowsText is an account's usage windows as the table shows them, and its used-up limit families: "5h 40% · 7d 12% · premium used up". */
export function windowsText(a: Pick<Account, 'live'>): string {
  return [
    ...(a.live.usage_windows ?? []).map((w) => `${w.name} ${Math.round(w.used_percent)}%`),
    ...(a.live.limit_families ?? []).filter((f) => f.cooling_until).map((f) => `${f.limit_name || f.id} used up`),
  ].join(' · ')
}

/** pagesFor returns the page indexes that rows [from, to] need. */
export function pagesFor(from: number, to: number, size = PAGE): number[] {
  const out: number[] = []
  for (let p = Math.floor(Math.max(from, 0) / size); p <= Math.floor(Math.max(to, 0) / size); p++) out.push(p)
  return out
}

export function Accounts() {
  const [f, setF] = useState<Filters>({ q: '', status: '', tier: '', provider: '', group: '', sort: 'name', order: 'asc' })
  const [total, setTotal] = useState<number | null>(null)
  const [pool, setPool] = useState(0)
  const [pages, setPages] = useState<Map<number, Account[]>>(new Map())
  const [selected, setSelected] = useState<Account | null>(null)
  const [dialog, setDialog] = useState<'' | 'add' | 'import'>('')
  const [error, setError] = useState('')
  const loading = useRef(new Set<number>())
  const gen = useRef(0)
  const scroller = useRef<HTMLDivElement>(null)

  const load = useCallback(
    (p: number) => {
      if (loading.current.has(p)) return
      loading.current.add(p)
      const g = gen.current
      api<Page>('GET', 'accounts' + query({ ...f, offset: p * PAGE, limit: PAGE }))
        .then((r) => {
          if (g !== gen.current) return
          setTotal(r.total)
          setPool(r.pool)
          setPages((m) => new Map(m).set(p, r.accounts))
          setError('')
        })
        .catch((e: Error) => setError(e.message))
        .finally(() => loading.current.delete(p))
    },
    [f],
  )

  // New filters: start over.
  useEffect(() => {
    gen.current++
    loading.current.clear()
    setPages(new Map())
    setTotal(null)
    load(0)
  }, [load])

  const rows = useVirtualizer({ count: total ?? 0, getScrollElement: () => scroller.current, estimateSize: () => ROW, overscan: 20 })
  const items = rows.getVirtualItems()
  const first = items[0]?.index ?? 0
  const last = items[items.length - 1]?.index ?? 0
  useEffect(() => {
    for (const p of pagesFor(first, last)) if (!pages.has(p)) load(p)
  }, [first, last, pages, load])

  // Live state: refresh the visible pages every 5 s.
  useEffect(() => {
    const t = setInterval(() => {
      for (const p of pagesFor(first, last)) {
        loading.current.delete(p)
        load(p)
      }
    }, 5000)
    return () => clearInterval(t)
  }, [first, last, load])

  const refresh = () => {
    gen.current++
    loading.current.clear()
    setPages(new Map())
    load(0)
  }
  const row = (i: number) => pages.get(Math.floor(i / PAGE))?.[i % PAGE]
  const set = (k: keyof Filters) => (e: { target: { value: string } }) => setF({ ...f, [k]: e.target.value })
  const sortBy = (k: string) => setF({ ...f, sort: k, order: f.sort === k && f.order === 'asc' ? 'desc' : 'asc' })
  const th = (k: string, label: string, cls = '') => (
    <div className={'th ' + cls} onClick={() => sortBy(k)} role="columnheader">
      {label}
      {f.sort === k ? (f.order === 'asc' ? ' ▲' : ' ▼') : ''}
    </div>
  )

  const exportAll = async () => {
    const data = await api('GET', 'accounts/export?format=troupe')
    const url = URL.createObjectURL(new Blob([JSON.stringify(data, null, 2)], { type: 'application/json' }))
    const a = document.createElement('a')
    a.href = url
    a.download = 'troupe-accounts.json'
    a.click()
    URL.revokeObjectURL(url)
  }

  return (
    <div className="page-accounts">
      <div className="head">
        <h2>Accounts</h2>
        <span className="muted" data-testid="accounts-total">
          {total === null ? '…' : `${num(total)} of ${num(pool)}`}
        </span>
        <div className="grow" />
        <button onClick={() => setDialog('add')}>Add account</button>
        <button onClick={() => setDialog('import')}>Import</button>
        <button className="ghost" onClick={exportAll}>
          Export
        </button>
      </div>
      <div className="filters">
        <input placeholder="Search name, id or tag" value={f.q} onChange={set('q')} name="q" />
        <select value={f.status} onChange={set('status')} name="status">
          <option value="">any status</option>
          {['active', 'cooling', 'disabled', 'unauthorized', 'banned', 'absent'].map((s) => (
            <option key={s}>{s}</option>
          ))}
        </select>
        <select value={f.tier} onChange={set('tier')} name="tier">
          <option value="">any tier</option>
          {['healthy', 'warm', 'risky', 'excluded'].map((s) => (
            <option key={s}>{s}</option>
          ))}
        </select>
        <select value={f.provider} onChange={set('provider')} name="provider">
          <option value="">any provider</option>
          {['codex', 'openai', 'openai_compat', 'anthropic'].map((s) => (
            <option key={s}>{s}</option>
          ))}
        </select>
        <input placeholder="group" value={f.group} onChange={set('group')} name="group" />
      </div>
      {error && <div className="error">{error}</div>}
      <div className="vtable">
        <div className="tr thead">
          {th('name', 'Name', 'w-name')}
          {th('provider', 'Provider', 'w-provider')}
          {th('status', 'Status', 'w-status')}
          {th('score', 'Tier · score', 'w-tier')}
          {th('inflight', 'In flight', 'r')}
          {th('requests', 'Requests', 'r')}
          {th('failures', 'Failures', 'r')}
          {th('success_rate', 'OK 1h', 'r w-stat')}
          {th('latency_p95', 'p95 1h', 'r w-stat')}
          {th('cooldown', 'Cooldown')}
          {th('windows', 'Windows', 'w-windows')}
        </div>
        <div className="vbody" ref={scroller} data-testid="accounts-rows">
          <div style={{ height: rows.getTotalSize(), position: 'relative' }}>
            {items.map((it) => {
              const a = row(it.index)
              return (
                <div
                  key={it.key}
                  className={'tr' + (a && selected?.id === a.id ? ' sel' : '')}
                  style={{ position: 'absolute', top: 0, left: 0, right: 0, height: ROW, transform: `translateY(${it.start}px)` }}
                  onClick={() => a && setSelected(a)}
                  data-row={a?.name}
                >
                  {a ? (
                    <>
                      <div className="td w-name" title={a.id}>
                        {a.name}
                        {a.group && <span className="tag">{a.group}</span>}
                      </div>
                      <div className="td w-provider">{a.provider}</div>
                      <div className="td w-status">
                        <span className={'pill ' + a.live.status}>{a.live.status}</span>
                        {a.hygiene && (
                          <span
                            className="tag flag"
                            title={(a.hygiene.action === 'disable' ? 'disabled by hygiene: ' : 'flagged: ') + a.hygiene.reason}
                            aria-label={a.hygiene.action === 'disable' ? 'disabled by hygiene' : 'flagged'}
                            data-testid="hygiene-tag"
                          >
                            ⚑
                          </span>
                        )}
                      </div>
                      <div className="td w-tier" data-testid="tier" title={a.live.score !== null ? a.live.score.toFixed(2) : undefined}>
                        <span className={'pill ' + a.live.tier}>{a.live.tier || '–'}</span> {a.live.score !== null ? a.live.score.toFixed(0) : ''}
                      </div>
                      <div className="td r">
                        {a.live.inflight}/{a.live.max_inflight}
                      </div>
                      <div className="td r">{num(a.live.requests, true)}</div>
                      <div className="td r">{num(a.live.failures, true)}</div>
                      <div className="td r w-stat" data-testid="success-1h">{a.stats_1h ? pct(a.stats_1h.success_rate) : '–'}</div>
                      <div className="td r w-stat">{a.stats_1h ? ms(a.stats_1h.latency_p95_ms) : '–'}</div>
                      <div className="td">
                        {a.live.cooldown_reason && a.live.status === 'cooling' ? `${a.live.cooldown_reason} ${seconds(a.live.cooldown_remaining_seconds)}` : ''}
                      </div>
                      <div className="td w-windows">{windowsText(a)}</div>
                    </>
                  ) : (
                    <div className="td muted">…</div>
                  )}
                </div>
              )
            })}
          </div>
        </div>
      </div>
      {selected && (
        <AccountPanel
          key={selected.id}
          account={selected}
          onClose={() => setSelected(null)}
          onChanged={(a) => {
            setSelected(a)
            refresh()
          }}
        />
      )}
      {dialog === 'add' && (
        <AccountForm
          onClose={() => setDialog('')}
          onSaved={() => {
            setDialog('')
            refresh()
          }}
        />
      )}
      {dialog === 'import' && (
        <ImportDialog
          onClose={() => setDialog('')}
          onDone={() => {
            setDialog('')
            refresh()
          }}
        />
      )}
    </div>
  )
}

export function AccountPanel({ account, onClose, onChanged }: { account: Account; onClose: () => void; onChanged: (a: Account | null) => void }) {
  const [a, setA] = useState(account)
  const [msg, setMsg] = useState('')
  const [edit, setEdit] = useState(false)
  const act = async (what: string) => {
    setMsg('')
    try {
      if (what === 'delete') {
        if (!confirm(`Delete ${a.name}?`)) return
        await api('DELETE', `accounts/${encodeURIComponent(a.id)}`)
        onChanged(null)
        return
      }
      if (what === 'restore') {
        await api('POST', `accounts/${encodeURIComponent(a.id)}/restore`)
        const r = await api<Account>('GET', `accounts/${encodeURIComponent(a.id)}`)
        setA(r)
        onChanged(r)
        setMsg('Restored: enabled, flag cleared, state reset to active.')
        return
      }
      if (what === 'probe') {
        const r = await api<{ ok: boolean; status: number; class: string; latency_ms: number; message?: string }>('POST', `accounts/${encodeURIComponent(a.id)}/probe`)
        setMsg(r.ok ? `Probe OK: ${r.status} in ${ms(r.latency_ms)}` : `Probe failed: ${r.class || 'error'} ${r.status || ''} ${r.message ?? ''}`)
        return
      }
      const r = await api<Account>('POST', `accounts/${encodeURIComponent(a.id)}/${what}`)
      setA(r)
      onChanged(r)
    } catch (e) {
      setMsg((e as Error).message)
    }
  }
  return (
    <aside className="panel" data-testid="account-panel">
      <div className="head">
        <h3>{a.name}</h3>
        <div className="grow" />
        <button className="ghost" onClick={() => navigate('accounts', a.name)} data-testid="account-stats-link">
          Statistics
        </button>
        <button className="ghost" onClick={onClose}>
          ✕
        </button>
      </div>
      <dl>
        <dt>id</dt>
        <dd className="mono">{a.id}</dd>
        <dt>provider</dt>
        <dd>{a.provider}</dd>
        <dt>base URL</dt>
        <dd className="mono">{a.base_url || 'default'}</dd>
        <dt>models</dt>
        <dd>{a.models.length ? a.models.join(', ') : 'any'}</dd>
        <dt>group · tags</dt>
        <dd>
          {a.group || 'default'} · {a.tags.join(', ') || '–'}
        </dd>
        <dt>concurrency · priority</dt>
        <dd>
          {a.max_concurrency || 1} · {a.priority}
        </dd>
        <dt>credentials</dt>
        <dd>
          {Object.entries(a.credentials)
            .filter(([, v]) => v)
            .map(([k]) => k)
            .join(', ') || 'none'}{' '}
          <span className="muted">(never shown)</span>
        </dd>
        <dt>status</dt>
        <dd>
          {a.live.status} {a.live.cooldown_reason && `(${a.live.cooldown_reason}, ${seconds(a.live.cooldown_remaining_seconds)})`}
        </dd>
        {a.hygiene && (
          <>
            <dt>hygiene</dt>
            <dd data-testid="hygiene-reason">
              {a.hygiene.action === 'disable' ? 'Disabled' : 'Flagged'} at {a.hygiene.at}: {a.hygiene.reason}
            </dd>
          </>
        )}
        <dt>success · latency</dt>
        <dd>
          {pct(a.live.ewma_success)} · {ms(a.live.ewma_latency_ms)}
        </dd>
      </dl>
      <div className="row">
        {a.hygiene && (
          <button onClick={() => act('restore')} data-testid="restore">
            Restore
          </button>
        )}
        {a.disabled ? <button onClick={() => act('enable')}>Enable</button> : <button onClick={() => act('disable')}>Disable</button>}
        <button onClick={() => act('probe')}>Probe</button>
        <button onClick={() => setEdit(true)}>Edit</button>
        <button className="danger" onClick={() => act('delete')}>
          Delete
        </button>
      </div>
      {msg && <p className="note">{msg}</p>}
      {edit && (
        <AccountForm
          account={a}
          onClose={() => setEdit(false)}
          onSaved={(r) => {
            setEdit(false)
            setA(r)
            onChanged(r)
          }}
        />
      )}
    </aside>
  )
}

function AccountForm({ account, onClose, onSaved }: { account?: Account; onClose: () => void; onSaved: (a: Account) => void }) {
  const [v, setV] = useState({
    name: account?.name ?? '',
    provider: account?.provider ?? 'openai',
    base_url: account?.base_url ?? '',
    models: account?.models.join(', ') ?? '',
    group: account?.group ?? '',
    tags: account?.tags.join(', ') ?? '',
    max_concurrency: String(account?.max_concurrency ?? 4),
    priority: String(account?.priority ?? 0),
    api_key: '',
    access_token: '',
    account_id: '',
  })
  const [error, setError] = useState('')
  const set = (k: keyof typeof v) => (e: { target: { value: string } }) => setV({ ...v, [k]: e.target.value })
  const save = async () => {
    const body: Record<string, unknown> = {
      name: v.name,
      provider: v.provider,
      base_url: v.base_url,
      models: list(v.models),
      group: v.group,
      tags: list(v.tags),
      max_concurrency: Number(v.max_concurrency) || 0,
      priority: Number(v.priority) || 0,
    }
    const cred: Record<string, string> = {}
    if (v.api_key) cred.api_key = v.api_key
    if (v.access_token) cred.access_token = v.access_token
    if (v.account_id) cred.account_id = v.account_id
    if (Object.keys(cred).length) body.credentials = cred
    if (account && account.version !== undefined) body.version = account.version // 409 edit_conflict if it changed since
    try {
      const r = account ? await api<Account>('PATCH', `accounts/${encodeURIComponent(account.id)}`, body) : await api<Account>('POST', 'accounts', body)
      onSaved(r)
    } catch (e) {
      // An edit_conflict (409: the account changed since it was read) says what to do in its message alone.
      setError(e instanceof ApiError && e.param && e.code !== 'edit_conflict' ? `${e.param}: ${e.message}` : (e as Error).message)
    }
  }
  return (
    <div className="modal">
      <div className="card form">
        <h3>{account ? `Edit ${account.name}` : 'Add account'}</h3>
        <label>
          Name
          <input value={v.name} onChange={set('name')} disabled={!!account} name="name" />
        </label>
        <label>
          Provider
          <select value={v.provider} onChange={set('provider')} name="provider">
            {['openai', 'codex', 'openai_compat', 'anthropic'].map((p) => (
              <option key={p}>{p}</option>
            ))}
          </select>
        </label>
        <label>
          Base URL
          <input value={v.base_url} onChange={set('base_url')} placeholder="provider default" name="base_url" />
        </label>
        <label>
          Models (comma-separated; empty: any)
          <input value={v.models} onChange={set('models')} name="models" />
        </label>
        <div className="row">
          <label>
            Group
            <input value={v.group} onChange={set('group')} name="group" />
          </label>
          <label>
            Tags
            <input value={v.tags} onChange={set('tags')} name="tags" />
          </label>
        </div>
        <div className="row">
          <label>
            Max concurrency
            <input value={v.max_concurrency} onChange={set('max_concurrency')} inputMode="numeric" name="max_concurrency" />
          </label>
          <label>
            Priority
            <input value={v.priority} onChange={set('priority')} inputMode="numeric" name="priority" />
          </label>
        </div>
        <label>
          API key {account?.credentials.api_key && <span className="muted">(set; leave empty to keep)</span>}
          <input value={v.api_key} onChange={set('api_key')} type="password" autoComplete="off" name="api_key" />
        </label>
        {v.provider === 'codex' && (
          <>
            <label>
              Access token {account?.credentials.access_token && <span className="muted">(set; leave empty to keep)</span>}
              <input value={v.access_token} onChange={set('access_token')} type="password" autoComplete="off" name="access_token" />
            </label>
            <label>
              ChatGPT account id
              <input value={v.account_id} onChange={set('account_id')} autoComplete="off" name="account_id" />
            </label>
          </>
        )}
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

export function ImportDialog({ onClose, onDone }: { onClose: () => void; onDone: () => void }) {
  const [text, setText] = useState('')
  const [result, setResult] = useState('')
  const [errors, setErrors] = useState<{ index: number; name: string; message: string }[]>([])
  // overwrite writes the file's state over accounts changed since it was
  // exported (?overwrite=1); without it such an import is refused with 409
  // import_stale, listing them, and nothing is written.
  const [overwrite, setOverwrite] = useState(false)
  const [stale, setStale] = useState(false)
  const run = async (dry: boolean) => {
    setResult('')
    setErrors([])
    setStale(false)
    try {
      const path = 'accounts/import?format=troupe' + (dry ? '&dry_run=1' : '') + (overwrite ? '&overwrite=1' : '')
      const r = await api<{ created: number; updated: number }>('POST', path, text)
      if (dry) setResult(`Would create ${r.created} and update ${r.updated} accounts.`)
      else {
        setResult(`Created ${r.created}, updated ${r.updated}.`)
        onDone()
      }
    } catch (e) {
      if (e instanceof ApiError && Array.isArray(e.body?.errors)) setErrors(e.body.errors)
      if (e instanceof ApiError && e.code === 'import_stale') {
        setStale(true)
        setResult('Changed by someone else since the export: ' + e.message)
      } else setResult((e as Error).message)
    }
  }
  const file = async (f: File | undefined) => {
    if (f) setText(await f.text())
  }
  return (
    <div className="modal">
      <div className="card form wide">
        <h3>Import accounts</h3>
        <p className="muted">A JSON array of accounts (the export format). Accounts are matched by name: new ones are created, existing ones updated; absent fields and credentials are kept.</p>
        <input type="file" accept=".json,application/json" onChange={(e) => file(e.target.files?.[0])} />
        <textarea value={text} onChange={(e) => setText(e.target.value)} rows={12} placeholder='[{"name": "oai-1", "provider": "openai", "api_key": "sk-…"}]' name="import" />
        <label className="check">
          <input type="checkbox" name="overwrite" checked={overwrite} onChange={(e) => setOverwrite(e.target.checked)} /> Overwrite accounts changed since
          the export (their newer state is lost)
        </label>
        {result && (
          <div className={errors.length || stale ? 'error' : 'note'} data-testid="import-result">
            {result}
            {stale && !overwrite && ' Tick "Overwrite" to import anyway, or export again.'}
          </div>
        )}
        {errors.length > 0 && (
          <ul className="plain error-list">
            {errors.slice(0, 50).map((e) => (
              <li key={e.index}>
                #{e.index} {e.name}: {e.message}
              </li>
            ))}
          </ul>
        )}
        <div className="row">
          <button onClick={() => run(true)} disabled={!text}>
            Check
          </button>
          <button onClick={() => run(false)} disabled={!text}>
            Import
          </button>
          <button className="ghost" onClick={onClose}>
            Close
          </button>
        </div>
      </div>
    </div>
  )
}
