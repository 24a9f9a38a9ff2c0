// End-to-end test of the users' console (/console/) in headless Chromium
// (playwright-core driving the Debian chromium; nothing is downloaded),
// against `troupe demo` on a free port with a fresh data directory. An
// operator (the admin API, from Node) prices a model and hands out an
// invitation; a visitor sees that registration is closed, then registers
// with the code, logs in, is topped up, creates a key (secret shown once,
// copied), spends through /v1, reads the request log with each request's
// cost and pages it, sees balance, spend and requests on the dashboard,
// changes the password (another session of the user ends, this one goes
// on), revokes the key and logs out. Every step is screenshotted into
// $ARTIFACTS (default ../.cache/artifacts/admin-ui, files console-*.png).
// Run by `make admin-ui-e2e` after e2e/run.mjs.
import { chromium } from 'playwright-core'
import { spawn } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { createInterface } from 'node:readline'

const bin = resolve(process.env.TROUPE_BIN || '../bin/troupe')
const artifacts = resolve(process.env.ARTIFACTS || '../.cache/artifacts/admin-ui')
const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium'
mkdirSync(artifacts, { recursive: true })

const deadline = setTimeout(() => fail('the console end-to-end test took longer than 4 minutes'), 240_000)
let demo, browser, page, dataDir

async function cleanup() {
  clearTimeout(deadline)
  await browser?.close().catch(() => {})
  if (demo && demo.exitCode === null) {
    demo.kill('SIGTERM')
    await Promise.race([new Promise((r) => demo.once('exit', r)), new Promise((r) => setTimeout(r, 15_000))])
    if (demo.exitCode === null) demo.kill('SIGKILL')
  }
  if (dataDir) rmSync(dataDir, { recursive: true, force: true })
}

async function fail(msg) {
  console.error('FAIL:', msg)
  if (page) await page.screenshot({ path: join(artifacts, 'console-failure.png'), fullPage: true }).catch(() => {})
  await cleanup()
  process.exit(1)
}

function check(cond, msg) {
  if (!cond) throw new Error(msg)
}

async function shot(name) {
  await page.waitForTimeout(300) // let charts and fetches settle
  await page.screenshot({ path: join(artifacts, 'console-' + name + '.png'), fullPage: false })
  console.log('screenshot console-' + name)
}

async function waitText(locator, re, what, timeout = 15_000) {
  const end = Date.now() + timeout
  let last = ''
  while (Date.now() < end) {
    last = (await locator.textContent().catch(() => '')) ?? ''
    if (re.test(last)) return last
    await page.waitForTimeout(200)
  }
  throw new Error(`${what}: got ${JSON.stringify(last)}, want ${re}`)
}

/** startDemo runs `troupe demo` and returns the lines it prints. */
function startDemo() {
  dataDir = mkdtempSync(join(tmpdir(), 'troupe-e2e-console-'))
  const env = { ...process.env }
  delete env.TROUPE_ADMIN_PASSWORD
  demo = spawn(bin, ['demo', '--listen', '127.0.0.1:0', '--accounts', '8', '--data', dataDir], { env, stdio: ['ignore', 'pipe', 'pipe'] })
  let log = ''
  demo.stderr.on('data', (d) => (log = (log + d).slice(-20000)))
  return new Promise((res, rej) => {
    const vars = {}
    const t = setTimeout(() => rej(new Error('troupe demo did not start in 60 s:\n' + log)), 60_000)
    createInterface({ input: demo.stdout }).on('line', (line) => {
      const m = line.match(/^(TROUPE_[A-Z_]+)=(.*)$/)
      if (m) vars[m[1]] = m[2]
      if (vars.TROUPE_ADMIN_PASSWORD && vars.TROUPE_ADMIN_URL && vars.TROUPE_BASE_URL) {
        clearTimeout(t)
        res(vars)
      }
    })
    demo.once('exit', (code) => rej(new Error(`troupe demo exited with ${code}:\n` + log)))
  })
}

/** operator logs in to the admin API from Node and returns a caller of it (the operator's side of the story). */
async function operator(origin, password) {
  const r = await fetch(origin + '/api/admin/login', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ username: 'admin', password }) })
  if (r.status !== 200) throw new Error(`admin login: ${r.status} ${await r.text()}`)
  const cookie = r.headers.getSetCookie().map((c) => c.split(';')[0]).join('; ')
  const { csrf_token } = await r.json()
  return async (method, path, body) => {
    const resp = await fetch(origin + '/api/admin/' + path, {
      method,
      headers: { Cookie: cookie, 'X-CSRF-Token': csrf_token, ...(body ? { 'Content-Type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    })
    const text = await resp.text()
    check(resp.ok, `${method} /api/admin/${path}: ${resp.status} ${text}`)
    return text ? JSON.parse(text) : null
  }
}

/** chat sends one request with key to /v1 and returns its status. */
async function chat(base, key, model = 'gpt-4.1-mini') {
  const r = await fetch(base + '/chat/completions', {
    method: 'POST',
    headers: { Authorization: 'Bearer ' + key, 'Content-Type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }),
  })
  await r.text()
  return r.status
}

const USER = 'e2e-ann'
const PASSWORD = 'violet staple orbit canyon'
const NEW_PASSWORD = 'amber lantern quietly folds'

async function main() {
  const env = await startDemo()
  const origin = new URL(env.TROUPE_ADMIN_URL).origin
  const consoleURL = origin + '/console/'
  console.log('demo at', consoleURL)
  const admin = await operator(origin, env.TROUPE_ADMIN_PASSWORD)
  await admin('PUT', 'prices/gpt-4.1-mini', { input: '2', output: '8' })

  browser = await chromium.launch({
    executablePath: chromiumPath,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  })
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 900 }, colorScheme: 'light' })
  await ctx.grantPermissions(['clipboard-read', 'clipboard-write'], { origin })
  page = await ctx.newPage()
  page.setDefaultTimeout(15_000)
  const pageErrors = []
  page.on('pageerror', (e) => pageErrors.push(String(e)))

  // Registration closed (the default): said plainly, nothing asked.
  await page.goto(consoleURL + 'register')
  await waitText(page.getByTestId('registration-closed'), /Registration is closed/, 'the closed registration message')
  check((await page.locator('input[name=password]').count()) === 0, 'a closed registration asks for a password')
  check((await page.title()) === 'Troupe console', `title ${await page.title()}`)
  await shot('01-register-closed')

  // Invite mode: the code field; a wrong code is refused, the right one registers.
  await admin('PUT', 'registration', { mode: 'invite' })
  const { code } = await admin('POST', 'invitations', { max_uses: 1, note: 'e2e' })
  await page.reload()
  await page.locator('input[name=invitation]').waitFor()
  await page.locator('input[name=name]').fill(USER)
  await page.locator('input[name=email]').fill('ann@example.com')
  await page.locator('input[name=password]').fill(PASSWORD)
  await page.locator('input[name=password2]').fill(PASSWORD)
  await page.locator('input[name=invitation]').fill('inv-wrong')
  await page.getByRole('button', { name: 'Create account' }).click()
  await waitText(page.getByRole('alert'), /^Invitation code: /, 'a wrong invitation code')
  await page.locator('input[name=invitation]').fill(code)
  await shot('02-register-invite')
  await page.getByRole('button', { name: 'Create account' }).click()
  await waitText(page.getByTestId('registered'), new RegExp(`Account ${USER} created`), 'registered')

  // Log in (a wrong password first), by email.
  await page.getByRole('link', { name: 'Log in' }).first().click()
  await page.locator('input[name=login]').fill('ann@example.com')
  await page.locator('input[name=password]').fill('not the password')
  await page.getByRole('button', { name: 'Log in' }).click()
  await waitText(page.getByRole('alert'), /Wrong name or password/, 'wrong password message')
  await shot('03-login')
  await page.locator('input[name=password]').fill(PASSWORD)
  await page.getByRole('button', { name: 'Log in' }).click()
  await waitText(page.getByTestId('console-user'), new RegExp(`^${USER}$`), 'logged in')
  await waitText(page.getByTestId('balance'), /^0\.00 /, 'the balance of a new user')

  // The operator tops the user up.
  await admin('POST', `users/${USER}/ledger`, { kind: 'topup', amount: '10', note: 'e2e welcome credit' })

  // Keys: create one with limits; the secret is shown once and copied.
  await page.getByRole('link', { name: 'API keys' }).click()
  await page.getByRole('button', { name: 'Create key' }).click()
  await page.locator('.modal input[name=name]').fill('laptop')
  await page.locator('.modal input[name=rpm]').fill('600')
  await page.locator('.modal input[name=expires_in]').fill('30')
  await page.getByRole('button', { name: 'Create', exact: true }).click()
  const secret = (await waitText(page.getByTestId('new-secret'), /^sk-troupe-/, 'the new secret')).trim()
  await page.getByRole('button', { name: 'Copy' }).click()
  await waitText(page.getByRole('button', { name: 'Copied' }), /Copied/, 'the copy button')
  const copied = await page.evaluate(() => navigator.clipboard.readText())
  check(copied === secret, 'the clipboard does not hold the secret')
  await shot('04-key-created')
  await page.getByRole('button', { name: 'Done' }).click()
  await waitText(page.locator('[data-key="laptop"]'), /active/, 'the key in the list')
  await waitText(page.locator('[data-key="laptop"]'), /600/, "the key's rpm in the list")
  check(!(await page.content()).includes(secret), 'the secret is still on the page after Done')
  await shot('05-keys')

  // Spend through /v1: more requests than a page of the log holds.
  const statuses = []
  for (let i = 0; i < 55; i += 5) statuses.push(...(await Promise.all([0, 1, 2, 3, 4].map(() => chat(env.TROUPE_BASE_URL, secret)))))
  check(statuses.every((s) => s === 200), `requests with the new key: ${statuses.join(',')}`)
  console.log('the user key served 55 requests on /v1')

  // Requests: 50 a page with each request's cost, the rest by next_cursor.
  // The gateway writes usage records in batches within about a second, not
  // in the order the requests ended: wait for all 55 before reading pages.
  {
    const end = Date.now() + 30_000
    let n = 0
    while ((n = await page.evaluate(() => fetch('/api/console/usage?limit=100').then((r) => r.json()).then((j) => j.records.length))) < 55) {
      check(Date.now() < end, `usage records written: ${n} of 55 after 30 s`)
      await page.waitForTimeout(200)
    }
  }
  await page.getByRole('link', { name: 'Requests' }).click()
  await waitText(page.getByTestId('requests-shown'), /^50 requests shown/, 'the first page of the request log', 30_000)
  const costs = await page.getByTestId('cost').allTextContents()
  check(costs.length === 50 && costs.every((c) => /^0\.\d+$/.test(c) && Number(c) > 0), `costs per request: ${costs.slice(0, 5)}`)
  await waitText(page.locator('[data-testid=requests] tbody tr').first(), /laptop.*gpt-4\.1-mini/, 'the key and model of a request')
  await shot('06-requests')
  await page.getByRole('button', { name: 'Load more' }).click()
  await waitText(page.getByTestId('requests-shown'), /^55 requests shown/, 'the second page of the request log')
  check((await page.getByRole('button', { name: 'Load more' }).count()) === 0, 'Load more offered after the last page')
  const ids = await page.locator('[data-testid=requests] tbody tr').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-request')))
  check(new Set(ids).size === 55, `request rows repeat: ${ids.length} rows, ${new Set(ids).size} distinct`)

  // Dashboard: the balance is the top-up less the charges; charts and the ledger.
  const bal = await page.evaluate(() => fetch('/api/console/balance').then((r) => r.json()))
  check(bal.balance_micro < 10_000_000 && bal.balance_micro > 0, `balance after spending: ${JSON.stringify(bal)}`)
  await page.getByRole('link', { name: 'Dashboard' }).click()
  await waitText(page.getByTestId('balance'), /^9\.\d+ /, 'the balance after spending')
  await waitText(page.getByTestId('spend-requests'), /^55$/, 'requests in the daily rollups', 30_000)
  await page.waitForSelector('[data-testid=spend-chart] canvas')
  await page.waitForSelector('[data-testid=requests-chart] canvas')
  await waitText(page.locator('[data-testid=requests-chart] [data-testid=chart-legend]'), /gpt-4\.1-mini\s*55/, 'requests in the chart legend')
  await waitText(page.locator('[data-testid=spend-chart] [data-testid=chart-legend]'), /gpt-4\.1-mini\s*0\.\d+/, 'spend in the chart legend')
  check((await page.locator('[data-ledger=charge]').count()) === 10, 'the newest ten ledger rows are not the charges')
  await waitText(page.locator('[data-ledger=charge] .amount').first(), /^-0\.\d+$/, 'a charge in the ledger')
  await shot('07-dashboard')
  // Older changes: the charges before, then the top-up.
  await page.getByRole('button', { name: 'Older changes' }).click()
  await waitText(page.locator('[data-ledger=topup]'), /top-up.*\+10\.00.*e2e welcome credit/s, 'the top-up in the ledger')
  check((await page.locator('[data-ledger=charge]').count()) === 55, 'every charge once in the ledger')

  // Another session of the same user, to be ended by the password change.
  const other = await browser.newContext()
  const otherPage = await other.newPage()
  await otherPage.goto(consoleURL)
  const otherLogin = await otherPage.evaluate(
    (b) => fetch('/api/console/login', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(b) }).then((r) => r.status),
    { name: USER, password: PASSWORD },
  )
  check(otherLogin === 200, `the second session's login: ${otherLogin}`)

  // Account: the password change (a wrong current password first).
  await page.getByRole('link', { name: 'Account' }).click()
  await waitText(page.getByTestId('account-name'), new RegExp(`^${USER}$`), 'the account page')
  await page.locator('input[name=current_password]').fill('not the password')
  await page.locator('input[name=new_password]').fill(NEW_PASSWORD)
  await page.locator('input[name=new_password2]').fill(NEW_PASSWORD)
  await page.getByRole('button', { name: 'Change password' }).click()
  await waitText(page.getByRole('alert'), /current password is wrong/, 'a wrong current password')
  await page.locator('input[name=current_password]').fill(PASSWORD)
  await page.getByRole('button', { name: 'Change password' }).click()
  await waitText(page.getByTestId('password-changed'), /Password changed/, 'the password change')
  await shot('08-password-changed')
  const otherMe = await otherPage.evaluate(() => fetch('/api/console/me').then((r) => r.status))
  check(otherMe === 401, `the other session after the password change: ${otherMe}`)
  await other.close()

  // This session goes on (its new CSRF token works): revoke the key.
  await page.getByRole('link', { name: 'API keys' }).click()
  page.once('dialog', (d) => d.accept())
  await page.locator('[data-key="laptop"]').getByRole('button', { name: 'Revoke' }).click()
  await page.locator('[data-key="laptop"]').waitFor({ state: 'detached' })
  check((await chat(env.TROUPE_BASE_URL, secret)) === 401, 'the revoked key still works on /v1')

  // Dark mode.
  await page.getByRole('button', { name: /Dark/ }).click()
  await page.getByRole('link', { name: 'Dashboard' }).click()
  await page.waitForSelector('[data-testid=spend-chart] canvas')
  await shot('09-dashboard-dark')

  // Logging out ends the session; the new password logs in, the old does not.
  await page.getByRole('button', { name: 'Log out' }).click()
  await page.locator('input[name=login]').waitFor()
  const me = await page.evaluate(() => fetch('/api/console/me').then((r) => r.status))
  check(me === 401, `after logout /api/console/me answers ${me}`)
  const login = (password) =>
    page.evaluate((b) => fetch('/api/console/login', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(b) }).then((r) => r.status), { name: USER, password })
  check((await login(PASSWORD)) === 401, 'the old password still logs in')
  check((await login(NEW_PASSWORD)) === 200, 'the new password does not log in')
  // A console session is not an admin one.
  check((await page.evaluate(() => fetch('/api/admin/me').then((r) => r.status))) === 401, 'a console session reaches /api/admin/')
  check(pageErrors.length === 0, 'page errors: ' + pageErrors.join('; '))
}

main()
  .then(async () => {
    await cleanup()
    console.log('users console end-to-end: ok; screenshots in', artifacts)
  })
  .catch((e) => fail(e.stack || String(e)))
