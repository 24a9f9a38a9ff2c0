import { num } from './format'

/** Counts shows a count per key; a count of zero is muted, never in its key's alarm colour. */
export function Counts({ title, data, order }: { title: string; data: Record<string, number>; order: string[] }) {
  return (
    <div className="card">
      <h3>{title}</h3>
      <div className="counts">
        {order.map((k) => (
          <div key={k} className={'count ' + ((data[k] ?? 0) > 0 ? k : 'zero')} data-testid={`${title.toLowerCase()}-${k}`}>
            <b>{num(data[k] ?? 0)}</b>
            <span>{k}</span>
          </div>
        ))}
      </div>
    </div>
  )
}
