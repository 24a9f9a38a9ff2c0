import { describe, expect, it } from 'vitest'
import { ago, list, ms, num, pct, seconds } from './format'

describe('format', () => {
  it('formats numbers', () => {
    expect(num(1234567)).toBe('1,234,567')
    expect(num(12_345, true)).toBe('12.3k')
    expect(num(2_000_000, true)).toBe('2M')
    expect(num(999, true)).toBe('999')
    expect(num(null)).toBe('–')
  })
  it('formats durations', () => {
    expect(seconds(4.2)).toBe('5s')
    expect(seconds(125)).toBe('2m')
    expect(seconds(3 * 3600 + 300)).toBe('3h 5m')
    expect(seconds(3600)).toBe('1h')
    expect(seconds(2 * 86400 + 4 * 3600)).toBe('2d 4h')
    expect(seconds(-1)).toBe('–')
    expect(ms(850)).toBe('850 ms')
    expect(ms(1250)).toBe('1.3 s')
  })
  it('formats relative times', () => {
    const now = Date.parse('2026-12-01T12:00:00Z')
    expect(ago('2026-12-01T11:55:00Z', now)).toBe('5m ago')
    expect(ago('2026-12-01T15:00:00Z', now)).toBe('in 3h')
    expect(ago('2026-12-01T12:00:01Z', now)).toBe('just now')
    expect(ago(null, now)).toBe('never')
  })
  it('formats fractions and lists', () => {
    expect(pct(0.973)).toBe('97.3%')
    expect(pct(1)).toBe('100%')
    expect(list(' a, b,,c ,')).toEqual(['a', 'b', 'c'])
    expect(list('')).toEqual([])
  })
})
