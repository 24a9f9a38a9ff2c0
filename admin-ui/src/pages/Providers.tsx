import { useState } from 'react'
import { api, query } from '../api'
import { ago } from '../format'
import { ProvidersTable, type ProvidersAnswer } from '../ProvidersTable'
import { STORED, WINDOWS } from '../stats'
import { usePoll } from '../usePoll'

/**
 * Providers is the providers' page (/admin/providers): each provider's
 * upstream attempts over a window (GET /api/admin/stats/providers). The
 * counts of the short windows are the answering instance's own, those of
 * the long ones every instance's, which the page says.
 */
export function Providers() {
  const [w, setW] = useState('1h')
  const { data, error } = usePoll(() => api<ProvidersAnswer>('GET', 'stats/providers' + query({ window: w })), [w], 10000)
  return (
    <div className="page-providers">
      <div className="head">
        <h2>Providers</h2>
        <div className="grow" />
        <div className="filters" role="tablist">
          {WINDOWS.map((n) => (
            <button key={n} className={n === w ? '' : 'ghost'} onClick={() => setW(n)} role="tab" aria-selected={n === w}>
              {n}
            </button>
          ))}
        </div>
      </div>
      {error && <div className="error">{error}</div>}
      {data && <ProvidersView data={data} />}
    </div>
  )
}

/** ProvidersView is the page below its head: where the counts come from, then the table. */
export function ProvidersView({ data }: { data: ProvidersAnswer }) {
  const stored = STORED.includes(data.window)
  return (
    <>
      {stored ? (
        <p className="muted small" data-testid="providers-source">
          Upstream attempts over the last {data.window} of every instance, from storage (each instance stores its counts every 5 s).
        </p>
      ) : (
        <p className="muted small" data-testid="providers-source">
          Upstream attempts over the last {data.window} counted by instance <b>{data.instance || '(unnamed)'}</b>, since it started {ago(data.since)}. Each instance counts its
          own attempts over 5m and 1h; another instance behind the same load balancer shows its own.
        </p>
      )}
      {data.providers.length ? (
        <ProvidersTable rows={data.providers} />
      ) : (
        <p className="muted" data-testid="providers-empty">
          {stored ? `No upstream attempt in the last ${data.window}.` : 'No upstream attempt on this instance since it started.'}
        </p>
      )}
    </>
  )
}
