// Money in the admin UI: amounts travel as decimal strings of the currency
// ("12.500000", docs/admin-api.md "Users and billing") and are never turned
// into floating-point numbers. Sums and comparisons are in micro-units held
// as BigInt; what a form sends is the string the operator typed, checked
// here with the server's own rule (billing.ParseAmount: digits, at most six
// after the point, no exponent).

const amountRe = /^\d+(\.\d{1,6})?$/
const signedRe = /^[+-]?\d+(\.\d{1,6})?$/

/** isAmount: s is a non-negative decimal the server reads exactly ("12", "0.5", "1.250000"). */
export function isAmount(s: string): boolean {
  return amountRe.test(s.trim())
}

/** isSignedAmount: as isAmount, with an optional sign (an adjustment may be negative). */
export function isSignedAmount(s: string): boolean {
  return signedRe.test(s.trim())
}

/** toMicro reads a decimal string into micro-units (BigInt); null when it is not one. */
export function toMicro(s: string): bigint | null {
  const t = s.trim()
  if (!signedRe.test(t)) return null
  const neg = t.startsWith('-')
  const body = t.replace(/^[+-]/, '')
  const [whole, frac = ''] = body.split('.')
  const v = BigInt(whole) * 1_000_000n + BigInt((frac + '000000').slice(0, 6))
  return neg ? -v : v
}

/** isPositive: s is an amount above zero (a top-up, a refund, a multiplier). */
export function isPositive(s: string): boolean {
  const v = toMicro(s)
  return v !== null && v > 0n && !s.trim().startsWith('-')
}

/**
 * fromMicro writes micro-units as a decimal string with at least `min`
 * decimals and at most six, trailing zeros beyond `min` dropped:
 * 12500000n → "12.50", 125n → "0.000125", -1500000n → "-1.50".
 */
export function fromMicro(v: bigint | number, min = 2): string {
  let m = typeof v === 'bigint' ? v : BigInt(Math.trunc(v))
  const neg = m < 0n
  if (neg) m = -m
  const whole = (m / 1_000_000n).toString()
  let frac = (m % 1_000_000n).toString().padStart(6, '0')
  while (frac.length > min && frac.endsWith('0')) frac = frac.slice(0, -1)
  const s = frac ? `${whole}.${frac}` : whole
  return neg ? '-' + s : s
}

/** money formats a decimal string from the API for display ("12.500000" → "12.50"); "–" when unreadable. */
export function money(s: string | null | undefined, currency = ''): string {
  const v = s == null ? null : toMicro(s)
  if (v === null) return '–'
  const out = fromMicro(v)
  return currency ? `${out} ${currency}` : out
}

/** sumMicro adds decimal strings exactly, into micro-units. */
export function sumMicro(amounts: string[]): bigint {
  let t = 0n
  for (const a of amounts) t += toMicro(a) ?? 0n
  return t
}

/**
 * defaultCacheWrite is the cache-write price the server sets when none is
 * given: the input price × 1.25, rounded half up to a micro-unit
 * (billing.DefaultCacheWrite); null when input is not an amount.
 */
export function defaultCacheWrite(input: string): string | null {
  const v = toMicro(input)
  if (v === null || v < 0n) return null
  return fromMicro((v * 5n + 2n) / 4n)
}
