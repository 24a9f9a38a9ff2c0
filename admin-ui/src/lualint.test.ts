import { describe, expect, it } from 'vitest'
import { diagnosticsFor, problemLine } from './lualint'

const doc = ['policy = {}', 'function score(a, now)', '  local x = = 1', 'end']

describe('diagnosticsFor', () => {
  it('covers the error line', () => {
    const [d] = diagnosticsFor(doc, { message: 'syntax error near =', line: 3 })
    expect(doc.join('\n').slice(d.from, d.to)).toBe('  local x = = 1')
    expect(d.severity).toBe('error')
    expect(d.message).toBe('line 3: syntax error near =')
  })
  it('falls back to the first line when the line is unknown', () => {
    for (const line of [0, -1]) {
      const [d] = diagnosticsFor(doc, { message: 'self-test failed', line })
      expect([d.from, d.to]).toEqual([0, doc[0].length])
    }
  })
  it('has nothing to say without a problem', () => {
    expect(diagnosticsFor(doc, null)).toEqual([])
  })
})

// Issue 18: an error at the end of the file was marked on line 1.
describe('problemLine at the end of the file', () => {
  const open = ['policy = {}', 'function score(a, now)', '  return 1', '', '']
  it('puts an end-of-file error on the last line that is not blank', () => {
    for (const message of ['policy p: syntax error at end of file', "'end' expected near <eof>"]) {
      expect(problemLine(open, { message, line: 0 })).toBe(3)
    }
    const [d] = diagnosticsFor(open, { message: 'policy p:3: syntax error at end of file', line: 3 })
    expect(open.join('\n').slice(d.from, d.to)).toBe('  return 1')
  })
  it('puts a line past the end on the last line, not the first', () => {
    expect(problemLine(open, { message: 'syntax error', line: 6 })).toBe(3)
    expect(problemLine(doc, { message: 'syntax error', line: 99 })).toBe(4)
  })
  it('reads the line from the message when the API gave none', () => {
    expect(problemLine(doc, { message: 'policy p:2: attempt to call a nil value', line: 0 })).toBe(2)
  })
})
