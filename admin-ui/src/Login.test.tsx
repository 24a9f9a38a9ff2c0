import { afterEach, describe, expect, it, vi } from 'vitest'
import { cleanup, fireEvent, render, screen, waitFor } from '@testing-library/react'
import { Login } from './pages/Login'

afterEach(() => {
  cleanup()
  vi.unstubAllGlobals()
})

describe('Login', () => {
  it('posts the credentials and hands over the session', async () => {
    const f = vi.fn(async () => new Response(JSON.stringify({ csrf_token: 'c', user: { username: 'admin' } }), { status: 200 }))
    vi.stubGlobal('fetch', f)
    const onLogin = vi.fn()
    render(<Login onLogin={onLogin} dark={false} toggleTheme={() => {}} />)
    fireEvent.change(screen.getByLabelText('Password'), { target: { value: 'pw' } })
    fireEvent.click(screen.getByRole('button', { name: 'Log in' }))
    await waitFor(() => expect(onLogin).toHaveBeenCalledWith({ auth: 'session', user: { username: 'admin' }, csrf_token: 'c' }))
    const [url, init] = (f.mock.calls as unknown as [string, RequestInit][])[0]
    expect(url).toBe('/api/admin/login')
    expect(JSON.parse(init.body as string)).toEqual({ username: 'admin', password: 'pw' })
  })
  it('shows the error of a refused login', async () => {
    vi.stubGlobal('fetch', vi.fn(async () => new Response(JSON.stringify({ error: { message: 'Wrong username or password.' } }), { status: 401 })))
    const onLogin = vi.fn()
    render(<Login onLogin={onLogin} dark={false} toggleTheme={() => {}} />)
    fireEvent.change(screen.getByLabelText('Password'), { target: { value: 'bad' } })
    fireEvent.click(screen.getByRole('button', { name: 'Log in' }))
    expect((await screen.findByRole('alert')).textContent).toBe('Wrong username or password.')
    expect(onLogin).not.toHaveBeenCalled()
  })
})
