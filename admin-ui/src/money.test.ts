import { describe, expect, it } from 'vitest'
import { fromMicro, isAmount, isPositive, isSignedAmount, money, sumMicro, toMicro } from './money'

describe('money', () => {
  it('reads decimal strings digit by digit, as the server does', () => {
    expect(toMicro('12.5')).toBe(12_500_000n)
    expect(toMicro('0.000001')).toBe(1n)
    expect(toMicro('-1.25')).toBe(-1_250_000n)
    expect(toMicro('90071992547.409931')).toBe(90_071_992_547_409_931n) // beyond 2^53 micro-units: exact
    for (const bad of ['', '1e3', '1.2345678', '.5', '1.', 'NaN', '1,5', ' 1 2']) expect(toMicro(bad)).toBeNull()
  })
  it('checks what the forms send', () => {
    expect(isAmount('10')).toBe(true)
    expect(isAmount('0.125')).toBe(true)
    expect(isAmount('-1')).toBe(false)
    expect(isAmount('1e2')).toBe(false)
    expect(isSignedAmount('-0.5')).toBe(true)
    expect(isPositive('0')).toBe(false)
    expect(isPositive('0.000001')).toBe(true)
    expect(isPositive('-2')).toBe(false)
  })
  it('writes micro-units with two decimals at least and six at most', () => {
    expect(fromMicro(12_500_000n)).toBe('12.50')
    expect(fromMicro(125n)).toBe('0.000125')
    expect(fromMicro(-1_500_000n)).toBe('-1.50')
    expect(fromMicro(0n)).toBe('0.00')
    expect(fromMicro(1_234_567n, 0)).toBe('1.234567')
    expect(fromMicro(3_000_000n, 0)).toBe('3')
    expect(money('12.500000', 'USD')).toBe('12.50 USD')
    expect(money(undefined)).toBe('–')
  })
  it('adds amounts without floating-point error', () => {
    // 0.1 + 0.2 is 0.30000000000000004 in floats.
    expect(fromMicro(sumMicro(['0.1', '0.2']))).toBe('0.30')
    expect(fromMicro(sumMicro(['0.000001', '0.000002', '-0.000001']))).toBe('0.000002')
  })
})
