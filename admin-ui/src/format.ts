// Formatting helpers shared by the pages.

/** num formats an integer with thousands separators; k/M above 10,000 when short. */
export function num(n: number | null | undefined, short = false): string {
  if (n === null || n === undefined || Number.isNaN(n)) return '–'
  if (short && Math.abs(n) >= 10_000) {
    if (Math.abs(n) >= 1_000_000) return (n / 1_000_000).toFixed(1).replace(/\.0$/, '') + 'M'
    return (n / 1_000).toFixed(1).replace(/\.0$/, '') + 'k'
  }
  return Math.round(n).toLocaleString('en-US')
}

/** seconds formats a duration in seconds as "45s", "12m", "3h 5m", "2d 4h". */
export function seconds(s: number | null | undefined): string {
  if (s === null || s === undefined || s < 0 || Number.isNaN(s)) return '–'
  if (s < 60) return `${Math.ceil(s)}s`
  const m = Math.floor(s / 60)
  if (m < 60) return `${m}m`
  const h = Math.floor(m / 60)
  if (h < 24) return m % 60 ? `${h}h ${m % 60}m` : `${h}h`
  const d = Math.floor(h / 24)
  return h % 24 ? `${d}d ${h % 24}h` : `${d}d`
}

/** ms formats milliseconds: "850 ms", "1.2 s". */
export function ms(v: number | null | undefined): string {
  if (v === null || v === undefined || Number.isNaN(v)) return '–'
  if (v < 1000) return `${Math.round(v)} ms`
  return `${(v / 1000).toFixed(1)} s`
}

/** ago formats a time relative to now: "just now", "5m ago", "in 3h". */
export function ago(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return 'never'
  const t = Date.parse(iso)
  if (Number.isNaN(t)) return '–'
  const d = (now - t) / 1000
  if (Math.abs(d) < 5) return 'just now'
  return d > 0 ? `${seconds(d)} ago` : `in ${seconds(-d)}`
}

/** pct formats a fraction in [0, 1] as a percentage. */
export function pct(f: number | null | undefined): string {
  if (f === null || f === undefined || Number.isNaN(f)) return '–'
  return `${(f * 100).toFixed(f >= 0.995 || f === 0 ? 0 : 1)}%`
}

/** list parses a comma-separated list, trimming blanks. */
export function list(s: string): string[] {
  return s
    .split(',')
    .map((x) => x.trim())
    .filter((x) => x !== '')
}
