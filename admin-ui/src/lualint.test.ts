import { describe, expect, it } from 'vitest'
import { diagnosticsFor } from './lualint'

const doc = ['policy = {}', 'function score(a, now)', '  local x = = 1', 'end']

describe('diagnosticsFor', () => {
  it('covers the error line', () => {
    const [d] = diagnosticsFor(doc, { message: 'syntax error near =', line: 3 })
    expect(doc.join('\n').slice(d.from, d.to)).toBe('  local x = = 1')
    expect(d.severity).toBe('error')
    expect(d.message).toBe('line 3: syntax error near =')
  })
  it('falls back to the first line when the line is unknown or out of range', () => {
    for (const line of [0, 99, -1]) {
      const [d] = diagnosticsFor(doc, { message: 'self-test failed', line })
      expect([d.from, d.to]).toEqual([0, doc[0].length])
    }
  })
  it('has nothing to say without a problem', () => {
    expect(diagnosticsFor(doc, null)).toEqual([])
  })
})
