import { colorFor, dashFor, summarize, type Series } from './chartdata'
import { num } from './format'

/** Legend lists each series with its line's colour and dash and its value. */
export function Legend({ series }: { series: Series[] }) {
  return (
    <ul className="legend" data-testid="chart-legend">
      {series.map((s, i) => {
        const v = summarize(s.values, s.summary)
        const shown = v === null ? '–' : s.format ? s.format(v) : num(v, true)
        return (
          <li key={s.label}>
            <svg width="28" height="10" aria-hidden="true">
              <line x1="1" y1="5" x2="27" y2="5" stroke={colorFor(s.label)} strokeWidth="2.5" strokeDasharray={dashFor(i).join(' ') || undefined} />
            </svg>
            <span className="name">{s.label}</span> <b data-testid={`legend-${s.label}`}>{shown}</b>
            <span className="muted">{s.summary === 'last' ? ' latest' : ' total'}</span>
          </li>
        )
      })}
    </ul>
  )
}
