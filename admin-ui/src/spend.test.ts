import { describe, expect, it } from 'vitest'
import { fromMicro } from './money'
import { dailySeries, dayRange, grandTotal, totals, type SpendRow } from './spend'

const row = (day: string, user: string, model: string, cost: string, requests = 1): SpendRow => ({
  day,
  user_id: user,
  model,
  requests,
  input_tokens: 100 * requests,
  cached_tokens: 10 * requests,
  output_tokens: 20 * requests,
  cost,
  cost_micro: Number(cost.replace('.', '')), // the tests' costs have six decimals
})

const rows = [
  row('2026-03-01', 'u1', 'gpt-5', '0.100000'),
  row('2026-03-02', 'u1', 'gpt-5', '0.200000', 2),
  row('2026-03-02', 'u2', 'gpt-5', '1.000000'),
  row('2026-03-03', 'u1', 'claude-sonnet-4', '0.000001'),
]

describe('spend', () => {
  it('sums per user and model exactly, most expensive first', () => {
    const t = totals(rows)
    expect(t.map((x) => [x.user_id, x.model, fromMicro(x.cost), x.requests])).toEqual([
      ['u2', 'gpt-5', '1.00', 1],
      ['u1', 'gpt-5', '0.30', 3],
      ['u1', 'claude-sonnet-4', '0.000001', 1],
    ])
    expect(t[1].input_tokens).toBe(300)
    expect(fromMicro(grandTotal(rows))).toBe('1.300001')
  })
  it('charts cost per day by model or by user, every day of the range', () => {
    const r = dayRange('2026-03-01', '2026-03-04')
    expect(r.fromISO).toBe('2026-03-01T00:00:00Z')
    expect(r.toISO).toBe('2026-03-05T00:00:00Z')
    const byModel = dailySeries(rows, r.from, r.to, 'model')
    expect(byModel.x.length).toBe(4)
    expect(byModel.series.map((s) => s.label)).toEqual(['claude-sonnet-4', 'gpt-5'])
    expect(byModel.series[1].values).toEqual([100_000, 1_200_000, 0, 0])
    expect(byModel.series[1].format!(1_300_000)).toBe('1.30')
    const byUser = dailySeries(rows, r.from, r.to, 'user', (id) => (id === 'u1' ? 'alice' : 'bob'))
    expect(byUser.series.map((s) => s.label)).toEqual(['alice', 'bob'])
    expect(byUser.series[0].values).toEqual([100_000, 200_000, 1, 0])
  })
})
