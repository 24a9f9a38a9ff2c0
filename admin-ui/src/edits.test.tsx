import { afterEach, describe, expect, it, vi } from 'vitest'
import { cleanup, fireEvent, render, screen, waitFor } from '@testing-library/react'
import { ApiError, editConflictText } from './api'
import { Keys } from './pages/Keys'
import { ImportDialog } from './pages/Accounts'

// Versioned edits (docs/admin-api.md "Concurrent edits"): the UI sends the
// version it read and shows the server's "changed by someone else … Reload"
// message on 409 edit_conflict; the import dialog offers ?overwrite=1 for
// 409 import_stale.

afterEach(() => {
  cleanup()
  vi.unstubAllGlobals()
})

const json = (status: number, body: unknown) => new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } })

const conflict = {
  error: {
    message: 'The API key "k1" was changed by someone else since you read it (version 3, now 4), on this instance or another; your change was not saved. Reload it and make your change again.',
    type: 'invalid_request_error',
    code: 'edit_conflict',
    param: 'version',
  },
}

describe('editConflictText', () => {
  it('is the message of a 409 edit_conflict, else empty', () => {
    expect(editConflictText(new ApiError(409, conflict))).toMatch(/changed by someone else since you read it.*Reload/)
    expect(editConflictText(new ApiError(409, { error: { code: 'edit_conflict' } }))).toMatch(/^Changed by someone else.*Reload/)
    expect(editConflictText(new ApiError(409, { error: { code: 'conflict', message: 'taken' } }))).toBe('')
    expect(editConflictText(new Error('x'))).toBe('')
  })
})

describe('API keys page', () => {
  it('disables a key with a PATCH carrying its version, and on edit_conflict says so and reloads', async () => {
    const key = (version: number, expires: string | null) => ({
      id: 'k1', name: 'k1', prefix: 'sk-troupe-ab', group: '', models: [], disabled: false, expires_at: expires,
      created_at: '2026-12-07T10:00:00Z', limits: { rpm: 0, rpd: 0, tokens_per_day: 0 }, admin: false, state: 'active', version,
    })
    const calls: { method: string; url: string; body?: string }[] = []
    let gets = 0
    vi.stubGlobal('fetch', vi.fn(async (url: string, init: RequestInit) => {
      calls.push({ method: init.method ?? 'GET', url, body: init.body as string | undefined })
      if (init.method === 'PATCH') return json(409, conflict)
      gets++
      return json(200, { keys: [gets === 1 ? key(3, null) : key(4, '2027-12-07T10:00:00Z')] })
    }))
    render(<Keys />)
    fireEvent.click(await screen.findByRole('button', { name: 'Disable' }))
    await screen.findByText(/changed by someone else since you read it/)
    const patch = calls.find((c) => c.method === 'PATCH')!
    expect(patch.url).toBe('/api/admin/keys/k1')
    expect(JSON.parse(patch.body!)).toEqual({ disabled: true, version: 3 })
    await waitFor(() => expect(gets).toBe(2)) // reloaded to the key as it is now
  })
})

describe('import dialog', () => {
  it('shows a stale import as changed by someone else and imports again with overwrite', async () => {
    const urls: string[] = []
    vi.stubGlobal('fetch', vi.fn(async (url: string) => {
      urls.push(url)
      if (!url.includes('overwrite=1'))
        return json(409, {
          error: { message: '1 of 1 accounts changed since the file was exported; nothing was imported.', type: 'invalid_request_error', code: 'import_stale', param: null },
          errors: [{ index: 0, name: 'oai-1', message: 'changed since the export (version 3 in the file, 5 stored)' }],
        })
      return json(200, { created: 0, updated: 1 })
    }))
    const done = vi.fn()
    render(<ImportDialog onClose={() => {}} onDone={done} />)
    fireEvent.change(document.querySelector('textarea[name=import]')!, { target: { value: '[{"name":"oai-1","version":3}]' } })
    fireEvent.click(screen.getByRole('button', { name: 'Import' }))
    expect((await screen.findByTestId('import-result')).textContent).toMatch(/Changed by someone else since the export.*Tick "Overwrite"/)
    expect(screen.getByText(/oai-1: changed since the export/)).toBeTruthy()
    expect(urls[0]).toBe('/api/admin/accounts/import?format=troupe')
    fireEvent.click(document.querySelector('input[name=overwrite]')!)
    fireEvent.click(screen.getByRole('button', { name: 'Import' }))
    await waitFor(() => expect(done).toHaveBeenCalled())
    expect(urls[1]).toBe('/api/admin/accounts/import?format=troupe&overwrite=1')
  })
})
