import { afterEach, describe, expect, it } from 'vitest'
import { cleanup, fireEvent, render, screen } from '@testing-library/react'
import { ACCOUNT_ROWS, FleetView, heartbeatAge, memberSeen, type FleetAnswer } from './pages/Fleet'

afterEach(cleanup)

const now = Date.parse('2026-12-06T09:00:00Z')
const answer = (over: Partial<FleetAnswer> = {}): FleetAnswer => ({
  self: 'gw-1-aaaa',
  shared: true,
  ownership: true,
  version: 4,
  heartbeat: '2026-12-06T08:59:59.600Z',
  members: [
    { id: 'gw-1-aaaa', addr: 'gw-1:8080', started: '2026-12-06T08:00:00Z', self: true },
    { id: 'gw-2-bbbb', addr: 'gw-2:8080', started: '2026-12-06T08:30:00Z', heartbeat_age_ms: 4200 },
  ],
  accounts: [
    { id: 'a1', name: 'oai-1', owner: 'gw-1-aaaa', held: true, token: 7 },
    { id: 'a2', name: 'oai-2', owner: 'gw-2-bbbb' },
    { id: 'a3', name: 'cx-1', owner: 'gw-2-bbbb' },
  ],
  owned: 1,
  ...over,
})

describe('FleetView', () => {
  it('shows the members with their addresses, ages and owned counts, and each account\'s owner', () => {
    render(<FleetView data={answer()} now={now} />)
    expect(screen.getByTestId('fleet-source').textContent).toContain('As seen by instance gw-1-aaaa, from the live set in Redis. Ownership on: 1 accounts run here.')
    expect(screen.getByTestId('fleet-heartbeat').textContent).toBe('0.4 s ago')
    const m1 = screen.getByTestId('member-gw-1-aaaa')
    expect(m1.textContent).toContain('(this one)')
    expect(m1.textContent).toContain('gw-1:8080')
    expect(m1.textContent).toContain('1h ago')
    expect(screen.getByTestId('member-owned-gw-1-aaaa').textContent).toBe('1')
    expect(screen.getByTestId('member-owned-gw-2-bbbb').textContent).toBe('2')
    // Each member's own last heartbeat; without an age (an older server), the set's last read.
    expect(screen.getByTestId('member-seen-gw-2-bbbb').textContent).toBe('4.2 s ago')
    expect(screen.getByTestId('member-seen-gw-1-aaaa').textContent).toBe('0.4 s ago')
    expect(screen.getByTestId('fleet-account-oai-1').textContent).toContain('held, token 7')
    expect(screen.getByTestId('fleet-account-oai-2').textContent).toBe('oai-2gw-2-bbbbno')
  })

  it('counts remote views and grants when routing across instances', () => {
    render(<FleetView data={answer({ remote_views: 2, remote: { issued: 1200, received: 40, held: 3, refused: { busy: 5, forged: 1, stale: 0 } } })} now={now} />)
    const r = screen.getByTestId('fleet-remote').textContent
    expect(r).toContain('2 accounts of other instances')
    expect(r).toContain('granted to others 1,200 (3 held now), received 40')
    expect(r).toContain('busy ×5 · forged ×1')
    expect(r).not.toContain('stale')
  })

  it('searches accounts by name, id or owner', () => {
    render(<FleetView data={answer()} now={now} />)
    fireEvent.change(screen.getByPlaceholderText('Search name, id or owner'), { target: { value: 'cx' } })
    expect(screen.queryByTestId('fleet-account-oai-1')).toBeNull()
    expect(screen.getByTestId('fleet-account-cx-1')).toBeTruthy()
    fireEvent.change(screen.getByPlaceholderText('Search name, id or owner'), { target: { value: 'gw-1' } })
    expect(screen.getByTestId('fleet-account-oai-1')).toBeTruthy()
    expect(screen.queryByTestId('fleet-account-cx-1')).toBeNull()
  })

  it('says when the instance is alone, without ownership, and when the heartbeat fails', () => {
    render(<FleetView data={answer({ shared: false, ownership: false, error: 'redis: connection refused', accounts: [{ id: 'a1', name: 'oai-1', owner: 'gw-1-aaaa' }] })} now={now} />)
    expect(screen.getByTestId('fleet-source').textContent).toContain('(cache.driver memory: this instance alone)')
    expect(screen.getByTestId('fleet-source').textContent).toContain('every instance runs every account')
    expect(screen.getByTestId('fleet-heartbeat').textContent).toContain('No heartbeat')
    expect(screen.queryByTestId('fleet-remote')).toBeNull()
    expect(screen.getByTestId('fleet-error').textContent).toContain('connection refused')
    expect(screen.getByTestId('fleet-account-oai-1').textContent).toContain('–')
  })

  it('draws at most ACCOUNT_ROWS accounts and says how many more', () => {
    const many = Array.from({ length: ACCOUNT_ROWS + 5 }, (_, i) => ({ id: 'id' + i, name: 'acct-' + i, owner: 'gw-1-aaaa' }))
    render(<FleetView data={answer({ accounts: many })} now={now} />)
    expect(screen.getByTestId('fleet-accounts').querySelectorAll('tbody tr').length).toBe(ACCOUNT_ROWS)
    expect(screen.getByTestId('fleet-more').textContent).toContain('5 more accounts')
  })

  it('says alone for a member of an unshared set, and a member\'s own age otherwise', () => {
    const a = answer()
    expect(memberSeen(a.members[1], a, now)).toBe('4.2 s ago')
    expect(memberSeen({ ...a.members[1], heartbeat_age_ms: 180000 }, a, now)).toBe('3m ago')
    expect(memberSeen(a.members[1], { ...a, shared: false }, now)).toBe('alone')
  })

  it('formats heartbeat ages', () => {
    expect(heartbeatAge(undefined, now)).toBe('never')
    expect(heartbeatAge('2026-12-06T08:58:00Z', now)).toBe('2m ago')
  })
})
