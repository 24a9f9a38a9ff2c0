import { useMemo, useState } from 'react'
import { api } from '../api'
import { Chart } from '../Chart'
import { num } from '../format'
import { navigate } from '../router'
import { charts, WINDOWS, type AccountStats as Stats } from '../stats'
import { WindowsTable } from '../WindowsTable'
import { usePoll } from '../usePoll'

/**
 * AccountStats is an account's page (/admin/accounts/{name}): its upstream
 * attempts over the five windows — requests, success rate, failure classes,
 * statuses, latency and TTFT quantiles, tokens — and charts of one window.
 */
export function AccountStats({ name, dark }: { name: string; dark: boolean }) {
  const [w, setW] = useState('1h')
  const { data, error } = usePoll(() => api<Stats>('GET', `accounts/${encodeURIComponent(name)}/stats?window=${w}`), [name, w], 10000)
  const c = useMemo(() => (data ? charts(data.points) : null), [data])
  return (
    <div className="page-account">
      <div className="head">
        <button className="ghost" onClick={() => navigate('accounts')}>
          ← Accounts
        </button>
        <h2 data-testid="account-name">{data?.name ?? name}</h2>
        {data && <span className="muted">{data.provider}</span>}
      </div>
      {error && <div className="error">{error}</div>}
      {data && <WindowsTable windows={data.windows} selected={w} onSelect={setW} />}
      {data && c && (
        <>
          <h3>
            Last {data.window} <span className="muted small">· one point per {num(data.step_s / 60)} min</span>
          </h3>
          <div className="filters" role="tablist">
            {WINDOWS.map((n) => (
              <button key={n} className={n === w ? '' : 'ghost'} onClick={() => setW(n)} role="tab" aria-selected={n === w}>
                {n}
              </button>
            ))}
          </div>
          <Chart x={c.x} series={c.counts} dark={dark} height={200} testid="account-requests-chart" />
          <Chart x={c.x} series={c.latency} dark={dark} height={200} testid="account-latency-chart" />
        </>
      )}
    </div>
  )
}
