import { afterEach, describe, expect, it } from 'vitest'
import { cleanup, render, screen } from '@testing-library/react'
import { HygieneRule, type HygieneAnswer } from './HygieneRule'

afterEach(cleanup)

const rule = (action: string): HygieneAnswer['rule'] => ({ action, unauthorized_after: '10m0s', rate_limited_after: '0s', interval: '1m0s' })

describe('HygieneRule', () => {
  it('says what the rule does and lists the accounts it flagged with their reasons', () => {
    const now = Date.parse('2026-12-07T10:30:00Z')
    render(
      <HygieneRule
        now={now}
        data={{
          rule: rule('disable'),
          flags: [
            { account_id: 'a1', name: 'oai-7', action: 'disable', kind: 'unauthorized', reason: 'unauthorized since 10:00: the upstream refused its credentials', since: '2026-12-07T10:00:00Z', at: '2026-12-07T10:10:00Z' },
          ],
        }}
      />,
    )
    expect(screen.getByTestId('hygiene-rule-text').textContent).toBe('Disables an account unauthorized for 10m0s or rate limited at every sweep for never; sweeps every 1m0s.')
    const row = screen.getByTestId('hygiene-flags').querySelector('tr')!
    expect(row.textContent).toBe('oai-7disabled20m agounauthorized since 10:00: the upstream refused its credentials')
  })

  it('says when the rule is off, and when it is on with nothing flagged', () => {
    render(<HygieneRule data={{ rule: rule('off'), flags: null }} />)
    expect(screen.getByTestId('hygiene-rule-text').textContent).toContain('Off')
    expect(screen.queryByText('No account flagged.')).toBeNull()
    cleanup()
    render(<HygieneRule data={{ rule: rule('flag'), flags: [] }} />)
    expect(screen.getByTestId('hygiene-rule-text').textContent).toMatch(/^Flags an account unauthorized for 10m0s/)
    expect(screen.getByText('No account flagged.')).toBeTruthy()
  })
})
