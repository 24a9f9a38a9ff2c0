import { describe, expect, it } from 'vitest'
import { followNewest, mergeLedger } from './ledger'

const r = (id: number) => ({ id })
const ids = (rows: { id: number }[]) => rows.map((x) => x.id)

describe('ledger', () => {
  it('merges the newest rows with older pages, each once, newest first', () => {
    expect(ids(mergeLedger([r(12), r(11), r(10)], [r(10), r(9), r(8)]))).toEqual([12, 11, 10, 9, 8])
  })
  it('keeps the older rows below a refreshed newest page that still meets them', () => {
    // Shown: 12..10 (newest page, next_before 10) and 9..8 loaded below.
    const older = { rows: [r(12), r(11), r(10), r(9), r(8)], next: 8 }
    // Two rows arrived: the newest page is 14..12, still reaching the rows kept.
    const kept = followNewest(older, { ledger: [r(14), r(13), r(12)], next_before: 12 })
    expect(kept && ids(kept.rows)).toEqual([14, 13, 12, 11, 10, 9, 8])
    expect(kept?.next).toBe(8)
    // A newest page that is the whole ledger meets anything.
    expect(followNewest(older, { ledger: [r(13)], next_before: null })?.next).toBe(8)
  })
  it('drops the older rows when rows between them and the newest page may be missing', () => {
    const older = { rows: [r(12), r(11), r(10), r(9), r(8)], next: 8 }
    // A page's worth and more arrived: 16..14, and 13 is in neither.
    expect(followNewest(older, { ledger: [r(16), r(15), r(14)], next_before: 14 })).toBeNull()
    expect(followNewest(null, { ledger: [r(1)], next_before: null })).toBeNull()
  })
})
