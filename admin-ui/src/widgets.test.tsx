import { afterEach, describe, expect, it } from 'vitest'
import { cleanup, render, screen } from '@testing-library/react'
import { Counts } from './Counts'
import { Legend } from './Legend'
import { LoadSpread } from './pages/Policies'

afterEach(cleanup)

describe('Counts', () => {
  it('paints a count in its status colour only when it is not zero', () => {
    render(<Counts title="Accounts" data={{ active: 24, banned: 0, unauthorized: 2 }} order={['active', 'banned', 'unauthorized', 'cooling']} />)
    expect(screen.getByTestId('accounts-banned').className).toBe('count zero')
    expect(screen.getByTestId('accounts-cooling').className).toBe('count zero')
    expect(screen.getByTestId('accounts-unauthorized').className).toBe('count unauthorized')
    expect(screen.getByTestId('accounts-active').className).toBe('count active')
  })
})

describe('Legend', () => {
  it('shows each series value without hovering, with its colour and dash', () => {
    render(<Legend series={[{ label: 'requests', values: [1, 2, 3] }, { label: 'failed', values: [0, 1, null] }, { label: 'latency p99', values: [900, 1500, null], summary: 'last', format: (v) => `${v} ms` }]} />)
    expect(screen.getByTestId('legend-requests').textContent).toBe('6')
    expect(screen.getByTestId('legend-failed').textContent).toBe('1')
    expect(screen.getByTestId('legend-latency p99').textContent).toBe('1500 ms')
    const lines = screen.getByTestId('chart-legend').querySelectorAll('line')
    expect(lines[0].getAttribute('stroke-dasharray')).toBeNull()
    expect(lines[1].getAttribute('stroke-dasharray')).toBe('8 4')
  })
})

describe('LoadSpread', () => {
  it('shows the busiest account and the Gini against an even spread', () => {
    render(
      <LoadSpread
        load={{ requests: 480, unserved: 0, accounts: 24, serving: 24, busiest: 21, busiest_share: 21 / 480, top1_accounts: 1, top1_share: 21 / 480, top1_even: 1 / 24, gini: 0.02, duration_ms: 40 }}
      />,
    )
    expect(screen.getByTestId('load-busiest').textContent).toBe('21 requests, 4.38%')
    expect(screen.getByTestId('load-gini').textContent).toBe('0.02')
    expect(screen.getByTestId('simulation-load').textContent).toContain('even: 4.17%')
  })
})
