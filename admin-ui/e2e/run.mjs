// End-to-end test of the admin UI in headless Chromium (playwright-core
// driving the Debian chromium at /usr/bin/chromium; nothing is downloaded).
// It starts `troupe demo` on a free port with a fresh data directory, then:
// logs in, imports accounts, creates an API key and uses it against /v1,
// writes a policy with a syntax error and sees the error at its line, fixes
// and activates it, and sees the pool view change; reads the account page and
// the Providers page over the statistics those requests made. Every page is
// screenshotted into $ARTIFACTS (default ../.cache/artifacts/admin-ui).
// Run by `make admin-ui-e2e` (part of `make test`).
import { chromium } from 'playwright-core'
import { spawn } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { createInterface } from 'node:readline'
import { billingPages } from './billing.mjs'

const bin = resolve(process.env.TROUPE_BIN || '../bin/troupe')
const artifacts = resolve(process.env.ARTIFACTS || '../.cache/artifacts/admin-ui')
const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium'
mkdirSync(artifacts, { recursive: true })

const deadline = setTimeout(() => fail('the end-to-end test took longer than 4 minutes'), 240_000)
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
  if (page) await page.screenshot({ path: join(artifacts, 'failure.png'), fullPage: true }).catch(() => {})
  await cleanup()
  process.exit(1)
}

function check(cond, msg) {
  if (!cond) throw new Error(msg)
}

async function shot(name) {
  await page.waitForTimeout(300) // let charts and fetches settle
  await page.screenshot({ path: join(artifacts, name + '.png'), fullPage: false })
  console.log('screenshot', name)
}

/** truncated returns the text of the cells matching selector that do not fit their width. */
async function truncated(selector) {
  return page.evaluate((sel) => [...document.querySelectorAll(sel)].filter((e) => e.scrollWidth > e.clientWidth + 1).map((e) => e.textContent), selector)
}

/** startDemo runs `troupe demo` and returns the lines it prints. */
function startDemo() {
  dataDir = mkdtempSync(join(tmpdir(), 'troupe-e2e-'))
  const env = { ...process.env }
  delete env.TROUPE_ADMIN_PASSWORD
  // The account hygiene rule, quick: flag an account unauthorized for 1 s, sweeping every second.
  Object.assign(env, { TROUPE_HYGIENE_ACTION: 'flag', TROUPE_HYGIENE_UNAUTHORIZED_AFTER: '1s', TROUPE_HYGIENE_INTERVAL: '1s' })
  demo = spawn(bin, ['demo', '--listen', '127.0.0.1:0', '--accounts', '24', '--data', dataDir], { env, stdio: ['ignore', 'pipe', 'pipe'] })
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

async function total() {
  const t = await page.getByTestId('accounts-total').textContent()
  return t
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

async function setEditor(text) {
  await page.locator('.cm-content').click()
  await page.keyboard.press('Control+A')
  await page.keyboard.press('Delete')
  await page.keyboard.insertText(text)
}

async function main() {
  const env = await startDemo()
  const adminURL = env.TROUPE_ADMIN_URL
  console.log('demo at', adminURL)
  browser = await chromium.launch({
    executablePath: chromiumPath,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  })
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 900 }, colorScheme: 'light' })
  page = await ctx.newPage()
  page.setDefaultTimeout(15_000)
  const consoleErrors = []
  page.on('pageerror', (e) => consoleErrors.push(String(e)))

  // Log in (a wrong password first).
  await page.goto(adminURL)
  await page.locator('input[name=password]').fill('wrong password')
  await page.getByRole('button', { name: 'Log in' }).click()
  await waitText(page.getByRole('alert'), /Wrong username or password/, 'wrong password message')
  await shot('01-login')
  await page.locator('input[name=password]').fill(env.TROUPE_ADMIN_PASSWORD)
  await page.getByRole('button', { name: 'Log in' }).click()
  await waitText(page.getByTestId('accounts-active'), /^24/, 'active accounts on the overview')
  await shot('02-overview')

  // Accounts: 24 demo accounts, all healthy under the default policy.
  await page.getByRole('link', { name: 'Accounts' }).click()
  await waitText(page.getByTestId('accounts-total'), /^24 of 24$/, 'accounts total')
  await waitText(page.locator('[data-row="demo-0001"] [data-testid=tier]'), /healthy/, 'demo-0001 tier before')
  // Provider and windows are never cut (openai_compat is the longest provider).
  await page.waitForSelector('.td.w-provider >> text=openai_compat')
  const cut = await truncated('.vtable .td.w-provider, .vtable .td.w-status, .vtable .td.w-tier, .vtable .td.w-windows, .vtable .th')
  check(cut.length === 0, 'truncated cells: ' + JSON.stringify(cut))
  // Every column sorts: Provider descending puts openai_compat first, Windows sorts too.
  await page.getByRole('columnheader', { name: /^Provider/ }).click()
  await page.getByRole('columnheader', { name: /^Provider/ }).click()
  await waitText(page.getByRole('columnheader', { name: /^Provider/ }), /▼/, 'provider sorted descending')
  await waitText(page.locator('.vbody .tr .td.w-provider').first(), /^openai_compat$/, 'first row by provider descending')
  await shot('03-accounts-by-provider')
  await page.getByRole('columnheader', { name: /^Windows/ }).click()
  await waitText(page.getByRole('columnheader', { name: /^Windows/ }), /▲/, 'sorted by windows')
  await page.getByRole('columnheader', { name: /^Name/ }).click()
  await waitText(page.locator('.vbody .tr .td.w-name').first(), /^demo-0001/, 'sorted by name again')
  await shot('03-accounts')

  // Import three accounts.
  await page.getByRole('button', { name: 'Import' }).click()
  const imported = [1, 2, 3].map((i) => ({ name: `e2e-imported-${i}`, provider: 'openai', base_url: 'http://127.0.0.1:9/v1', models: ['gpt-4.1-mini'], disabled: true, api_key: `sk-e2e-${i}` }))
  await page.locator('textarea[name=import]').fill(JSON.stringify(imported, null, 2))
  await page.getByRole('button', { name: 'Check' }).click()
  await waitText(page.locator('.modal .note'), /Would create 3/, 'import check')
  await shot('04-accounts-import')
  await page.getByRole('button', { name: 'Import', exact: true }).last().click()
  await waitText(page.getByTestId('accounts-total'), /^27 of 27$/, 'accounts after import')
  // An import whose entry carries a version its account is no longer at (changed since the
  // export) is refused, 409 import_stale, naming the entry; with Overwrite ticked it is written.
  await page.getByRole('button', { name: 'Import' }).click()
  await page.locator('textarea[name=import]').fill(JSON.stringify([{ ...imported[0], version: 999999999 }]))
  await page.getByRole('button', { name: 'Import', exact: true }).last().click()
  await waitText(page.getByTestId('import-result'), /Changed by someone else since the export.*Tick "Overwrite"/, 'a stale import refused')
  await waitText(page.locator('.modal .error-list'), /e2e-imported-1: changed since the export/, 'the stale entry named')
  await shot('04-accounts-import-stale')
  await page.locator('.modal input[name=overwrite]').check()
  await page.getByRole('button', { name: 'Import', exact: true }).last().click()
  await page.locator('.modal').waitFor({ state: 'detached' })
  await waitText(page.getByTestId('accounts-total'), /^27 of 27$/, 'accounts after the overwriting import')
  await page.locator('input[name=q]').fill('e2e-imported')
  await waitText(page.getByTestId('accounts-total'), /^3 of 27$/, 'search for imported accounts')
  await page.locator('[data-row="e2e-imported-2"]').click()
  await waitText(page.getByTestId('account-panel'), /api_key/, 'credentials shown as set')
  check(!(await page.content()).includes('sk-e2e-2'), 'an imported credential is visible in the page')
  await shot('05-account-panel')
  await page.locator('[data-testid=account-panel] button', { hasText: '✕' }).click()
  await page.locator('input[name=q]').fill('')

  // Create an API key and use it against /v1.
  await page.getByRole('link', { name: 'API keys' }).click()
  await page.getByRole('button', { name: 'Create key' }).click()
  await page.locator('.modal input[name=name]').fill('e2e-key')
  await page.locator('.modal input[name=rpm]').fill('600')
  await page.getByRole('button', { name: 'Create', exact: true }).click()
  const secret = (await waitText(page.getByTestId('new-secret'), /^sk-troupe-/, 'the new secret')).trim()
  await shot('06-key-created')
  await page.getByRole('button', { name: 'Done' }).click()
  await waitText(page.locator('[data-key="e2e-key"]'), /active/, 'the key in the list')
  check(!(await page.content()).includes(secret), 'the secret is still on the page after Done')
  await shot('07-keys')
  // Enable and disable send the key's version: a key changed since the page read it is refused,
  // 409 edit_conflict, with the server's "changed by someone else … Reload" message, and the
  // list reloads to the key as it is now; the next click applies.
  {
    const status = await page.evaluate(async () => {
      const me = await fetch('/api/admin/me').then((r) => r.json())
      const r = await fetch('/api/admin/keys/e2e-key', {
        method: 'PATCH',
        headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': me.csrf_token },
        body: JSON.stringify({ expires_in: '8760h' }),
      })
      return r.status
    })
    check(status === 200, `a change of the key behind the page: ${status}`)
    await page.locator('[data-key="e2e-key"] button', { hasText: 'Disable' }).click()
    await waitText(page.locator('.error'), /changed by someone else since you read it.*Reload/, 'a stale key edit refused')
    await page.waitForFunction(() => !document.querySelector('[data-key="e2e-key"]')?.textContent?.includes('never'))
    await shot('07-keys-edit-conflict')
    await page.locator('[data-key="e2e-key"] button', { hasText: 'Disable' }).click()
    await waitText(page.locator('[data-key="e2e-key"]'), /disabled/, 'the key disabled at its current version')
    await page.locator('[data-key="e2e-key"] button', { hasText: 'Enable' }).click()
    await waitText(page.locator('[data-key="e2e-key"]'), /active/, 'the key enabled again')
  }
  for (let i = 0; i < 3; i++) {
    const r = await fetch(env.TROUPE_BASE_URL + '/chat/completions', {
      method: 'POST',
      headers: { Authorization: 'Bearer ' + secret, 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4.1-mini', messages: [{ role: 'user', content: 'hi' }] }),
    })
    const body = await r.text()
    check(r.status === 200, `the new key against /v1: ${r.status} ${body}`)
  }
  console.log('the new key served 3 requests on /v1')
  // A request to a codex account, whose answer reports its usage windows.
  {
    const r = await fetch(env.TROUPE_BASE_URL + '/chat/completions', {
      method: 'POST',
      headers: { Authorization: 'Bearer ' + secret, 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-5.5', messages: [{ role: 'user', content: 'hi' }] }),
    })
    check(r.status === 200, `a codex request: ${r.status} ${await r.text()}`)
  }

  // Usage: the three requests show up. They are written within a second,
  // but the page may have fetched just before that and polls every 30 s.
  await page.getByRole('link', { name: 'Usage' }).click()
  await waitText(page.getByTestId('usage-requests'), /^[1-9]/, 'usage requests', 45_000)
  await page.waitForSelector('[data-testid=usage-chart] canvas')
  await waitText(page.getByTestId('chart-legend'), /gpt-4\.1-mini\s*[1-9]/, 'the usage legend shows the series value without hovering')
  await shot('08-usage')

  // The account page of an account that served those requests, reached from
  // its panel in the accounts table: the five windows and the charts.
  {
    const briefs = await page.evaluate(() => fetch('/api/admin/stats/accounts?window=5m').then((r) => r.json()))
    const id = Object.keys(briefs.accounts).find((k) => briefs.accounts[k].requests > 0)
    check(id, `no account has attempts in the 5m statistics: ${JSON.stringify(briefs)}`)
    const acct = await page.evaluate((id) => fetch('/api/admin/accounts/' + encodeURIComponent(id)).then((r) => r.json()), id)
    await page.getByRole('link', { name: 'Accounts' }).click()
    await page.locator('input[name=q]').fill(acct.name)
    await waitText(page.getByTestId('accounts-total'), /^1 of /, 'search for the account that served')
    await waitText(page.locator(`[data-row="${acct.name}"] [data-testid=success-1h]`), /^\d+(\.\d)?%$/, "the table's last-hour success rate")
    await shot('08-account-row')
    await page.locator(`[data-row="${acct.name}"]`).click()
    await page.getByTestId('account-stats-link').click()
    await waitText(page.getByTestId('account-name'), new RegExp('^' + acct.name + '$'), 'the account page')
    await waitText(page.getByTestId('success-5m'), /^\d+(\.\d)?%$/, 'the 5m success rate')
    // The long windows are read from storage (every instance's counts).
    await waitText(page.getByTestId('success-7d'), /^\d+(\.\d)?%$/, 'the 7d success rate, from storage')
    await page.getByRole('tab', { name: '24h' }).click()
    await page.waitForSelector('[data-testid=account-requests-chart] canvas')
    await waitText(page.getByTestId('account-requests-chart'), /requests\s*[1-9]/, 'requests in the 24h chart, from storage')
    await page.waitForSelector('[data-testid=account-requests-chart] canvas')
    await waitText(page.getByTestId('account-requests-chart'), /requests\s*[1-9]/, 'requests in the account chart legend')
    await page.getByRole('tab', { name: '5m' }).click()
    await waitText(page.getByTestId('account-latency-chart'), /latency p95\s*\d/, 'latency in the account chart legend')
    await shot('08-account-stats')
    await page.getByRole('button', { name: '← Accounts' }).click()
    await page.locator('input[name=q]').fill('')
  }

  // Providers: each provider's attempts over a window, from this instance's
  // counts (the requests above went to openai and codex accounts).
  await page.getByRole('link', { name: 'Providers' }).click()
  await waitText(page.getByTestId('provider-requests-openai'), /^[1-9]/, 'openai requests on the Providers page')
  await waitText(page.getByTestId('provider-success-openai'), /^\d+(\.\d)?%$/, "openai's success rate")
  await waitText(page.getByTestId('provider-latency-openai'), /^\d.* · .* · /, "openai's latency p50 · p95 · p99")
  await waitText(page.getByTestId('providers-source'), /counted by instance \S+/, 'the instance that counted')
  await page.getByRole('tab', { name: '5m' }).click()
  await waitText(page.getByTestId('providers-source'), /last 5m/, 'the 5m window')
  await waitText(page.getByTestId('provider-requests-openai'), /^[1-9]/, 'openai requests in the last 5 minutes')
  await page.getByRole('tab', { name: '7d' }).click()
  await waitText(page.getByTestId('providers-source'), /last 7d of every instance, from storage/, 'the 7d window, from storage')
  await waitText(page.getByTestId('provider-requests-openai'), /^[1-9]/, 'openai requests in the last 7 days')
  await page.getByRole('tab', { name: '5m' }).click()
  await waitText(page.getByTestId('providers-source'), /last 5m/, 'the 5m window again')
  {
    const cut = await truncated('[data-testid=providers-table] td, [data-testid=providers-table] th')
    check(cut.length === 0, `Providers cells cut: ${JSON.stringify(cut)}`)
  }
  await shot('08-providers')

  // Fleet: the live instances and each account's owner. The demo runs
  // alone (the in-memory cache): one member, this one, owning every account.
  await page.getByRole('link', { name: 'Fleet' }).click()
  await waitText(page.getByTestId('fleet-source'), /As seen by instance \S+ \(cache.driver memory/, 'the instance the fleet page asked')
  await waitText(page.getByTestId('fleet-heartbeat'), /No heartbeat/, 'no heartbeat when alone')
  check((await page.locator('input[name=fleet-q]').evaluate((e) => e.scrollWidth <= e.clientWidth + 1)), 'the fleet search box is cut')
  {
    const members = await page.locator('[data-testid=fleet-members] tbody tr').count()
    check(members === 1, `fleet members: ${members}, want 1 (the demo alone)`)
    const owned = await page.locator('[data-testid^=member-owned-]').first().textContent()
    const rows = await page.locator('[data-testid=fleet-accounts] tbody tr').count()
    check(Number(owned?.replace(/,/g, '')) >= rows && rows > 0, `the one member owns ${owned}, ${rows} account rows drawn`)
    const cut = await truncated('[data-testid=fleet-members] td, [data-testid=fleet-members] th, [data-testid=fleet-accounts] td')
    check(cut.length === 0, `Fleet cells cut: ${JSON.stringify(cut)}`)
  }
  await shot('08-fleet')

  // Account hygiene: an account whose key the upstream refuses is flagged by
  // the rule, tagged in the table with its reason on hover, shows the reason
  // in its panel and is restored in one click; then it is deleted again.
  {
    // An openai demo account's base URL: the mock fleet, which refuses an unknown key with 401.
    const ref = await page.evaluate(async () => {
      const list = await fetch('/api/admin/accounts?provider=openai&limit=1').then((r) => r.json())
      return fetch('/api/admin/accounts/' + encodeURIComponent(list.accounts[0].name)).then((r) => r.json())
    })
    check(ref.provider === 'openai' && ref.base_url, `no openai demo account: ${JSON.stringify(ref)}`)
    await page.getByRole('link', { name: 'Accounts' }).click()
    await page.getByRole('button', { name: 'Import' }).click()
    const revoked = [{ name: 'e2e-revoked', provider: 'openai', base_url: ref.base_url, models: ['e2e-revoked-model'], disabled: false, api_key: 'sk-e2e-revoked' }]
    await page.locator('textarea[name=import]').fill(JSON.stringify(revoked))
    await page.getByRole('button', { name: 'Check' }).click()
    await waitText(page.locator('.modal .note'), /Would create 1/, 'import check of the revoked account')
    await page.getByRole('button', { name: 'Import', exact: true }).last().click()
    await waitText(page.getByTestId('accounts-total'), /^28 of 28$/, 'accounts after importing the revoked one')
    const r = await fetch(env.TROUPE_BASE_URL + '/chat/completions', {
      method: 'POST',
      headers: { Authorization: 'Bearer ' + secret, 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'e2e-revoked-model', messages: [{ role: 'user', content: 'hi' }] }),
    })
    const body = await r.text()
    check(r.status !== 200, `a request to the account the upstream refuses answered 200: ${body}`)
    await page.locator('input[name=q]').fill('e2e-revoked')
    await waitText(page.getByTestId('accounts-total'), /^1 of /, 'search for the revoked account')
    await waitText(page.locator('[data-row="e2e-revoked"] [data-testid=hygiene-tag]'), /^⚑$/, 'the hygiene flag in the table', 45_000)
    const tag = page.locator('[data-row="e2e-revoked"] [data-testid=hygiene-tag]')
    const title = await tag.getAttribute('title')
    check(/^flagged: .*unauthorized/.test(title ?? ''), `the hygiene flag's reason on hover: ${title}`)
    check((await tag.getAttribute('aria-label')) === 'flagged', 'the hygiene flag names itself for screen readers')
    const cutStatus = await truncated('[data-row="e2e-revoked"] .td.w-status')
    check(cutStatus.length === 0, `the status cell of an unauthorized, flagged account is cut: ${JSON.stringify(cutStatus)}`)
    await page.locator('[data-row="e2e-revoked"]').click()
    await waitText(page.getByTestId('hygiene-reason'), /^Flagged at .*unauthorized/, 'the hygiene reason in the panel')
    await shot('08-hygiene-flagged')
    await page.getByTestId('restore').click()
    await page.getByTestId('hygiene-reason').waitFor({ state: 'detached', timeout: 15_000 })
    check((await page.getByTestId('restore').count()) === 0, 'Restore is still offered after restoring')
    await waitText(page.locator('[data-row="e2e-revoked"] .pill').first(), /^active/, 'the restored account active again')
    page.once('dialog', (d) => d.accept())
    await page.locator('[data-testid=account-panel] button', { hasText: 'Delete' }).click()
    await page.locator('input[name=q]').fill('')
    await waitText(page.getByTestId('accounts-total'), /^27 of 27$/, 'accounts after deleting the revoked one')
  }

  // Overview: trend charts over the window, with their values in the legends.
  await page.getByRole('link', { name: 'Overview' }).click()
  await page.waitForSelector('[data-testid=trends] canvas')
  await waitText(page.getByTestId('legend-requests'), /^[1-9]/, 'requests in the trend legend', 45_000)
  check((await page.locator('[data-testid=trends] canvas').count()) >= 4, 'trend charts drawn')
  for (const k of ['banned', 'unauthorized']) {
    const cls = await page.getByTestId('accounts-' + k).getAttribute('class')
    check(cls === 'count zero', `a zero count of ${k} is painted as ${cls}`)
  }
  await page.locator('select[name=window]').selectOption('24h')
  await waitText(page.getByTestId('legend-requests'), /^[1-9]/, 'requests over 24h')
  await page.waitForTimeout(300)
  await page.getByTestId('trends').screenshot({ path: join(artifacts, '08-overview-trends.png') })
  console.log('screenshot 08-overview-trends')

  // A policy with a syntax error: the error is marked at its line.
  await page.getByRole('link', { name: 'Policies' }).click()
  await page.locator('input[name=new-policy]').fill('e2e')
  await page.locator('input[name=new-policy]').press('Enter')
  await page.waitForSelector('.cm-content')
  const bad = ['policy = { description = "everyone warm" }', 'function score(a, now)', '  local x = = 1', '  return 1, "warm"', 'end', ''].join('\n')
  await setEditor(bad)
  await page.getByRole('button', { name: 'Validate' }).click()
  const err = await waitText(page.getByTestId('policy-error'), /^line 3: /, 'the syntax error with its line')
  await page.waitForSelector('.cm-lintRange-error')
  const marked = await page.evaluate(() => {
    const m = document.querySelector('.cm-lintRange-error')
    return m?.closest('.cm-line')?.textContent ?? ''
  })
  check(marked.includes('local x = = 1'), `the marked line is ${JSON.stringify(marked)}, want line 3`)
  check((await page.locator('.cm-gutter-lint .cm-lint-marker-error').count()) === 1, 'one error marker in the gutter')
  console.log('syntax error shown:', err)
  await shot('09-policy-error')

  // A block left open: the end-of-file error is marked on the last line, not line 1.
  const open = ['policy = { description = "everyone warm" }', 'function score(a, now)', '  if a.status ~= "active" then return nil end', '  return 1, "warm"', ''].join('\n')
  await setEditor(open)
  await page.getByRole('button', { name: 'Validate' }).click()
  await waitText(page.getByTestId('policy-error'), /^line 4: .*end of file/, 'the end-of-file error with the last line')
  await page.waitForSelector('.cm-lintRange-error')
  const eof = await page.evaluate(() => document.querySelector('.cm-lintRange-error')?.closest('.cm-line')?.textContent ?? '')
  check(eof.includes('return 1, "warm"'), `the end-of-file error marks ${JSON.stringify(eof)}, want the last line`)
  await shot('09-policy-eof-error')

  // Fix it, simulate, save, activate: the pool turns warm.
  const good = ['policy = { description = "everyone warm" }', 'function score(a, now)', '  if a.status ~= "active" then return nil end', '  return 1, "warm"', 'end', ''].join('\n')
  await setEditor(good)
  await page.getByRole('button', { name: 'Validate' }).click()
  await waitText(page.getByTestId('policy-msg'), /Valid/, 'validation of the fixed policy')
  check((await page.locator('.cm-lintRange-error').count()) === 0, 'the error mark stays after the fix')
  await page.getByRole('button', { name: 'Simulate' }).click()
  await waitText(page.getByTestId('simulation'), /change tier/, 'simulation')
  // The steady load spreads evenly over the 24 equal demo accounts.
  await waitText(page.getByTestId('load-gini'), /^0\.0\d$/, 'the simulated load spread (Gini)')
  await page.getByTestId('simulation-load').scrollIntoViewIfNeeded()
  await shot('10-policy-simulate')
  await page.getByRole('button', { name: 'Save' }).click()
  await waitText(page.getByTestId('policy-msg'), /Saved as version 1/, 'save')
  await page.getByRole('button', { name: 'Activate latest' }).click()
  await waitText(page.getByTestId('policy-msg'), /Version 1 of e2e is serving/, 'activate')
  await waitText(page.getByTestId('reload-status'), /serving e2e/, 'reload status', 20_000)
  await shot('11-policy-active')

  await page.getByRole('link', { name: 'Accounts' }).click()
  await waitText(page.locator('[data-row="demo-0001"] [data-testid=tier]'), /warm/, 'demo-0001 tier after activation', 20_000)
  await page.locator('select[name=tier]').selectOption('warm')
  await waitText(page.getByTestId('accounts-total'), /^24 of 27$/, 'warm accounts after activation', 20_000)
  await shot('12-accounts-after-policy')

  await page.getByRole('link', { name: 'Overview' }).click()
  await waitText(page.getByTestId('tiers-warm'), /^24/, 'warm tier on the overview', 20_000)
  await waitText(page.getByTestId('policy-name'), /^e2e$/, 'policy on the overview')
  await shot('13-overview-after-policy')

  await page.getByRole('link', { name: 'Settings' }).click()
  await page.waitForSelector('text=This instance')
  // The hygiene rule as configured; the account it flagged was restored above.
  await waitText(page.getByTestId('hygiene-rule-text'), /^Flags an account unauthorized for 1s /, 'the hygiene rule in Settings')
  await waitText(page.getByTestId('hygiene-rule'), /No account flagged/, 'no account left flagged')
  await shot('14-settings')

  // The billing admin pages (e2e/billing.mjs).
  await billingPages({ page, env, shot, waitText, check })

  // Dark mode.
  await page.getByRole('button', { name: /Dark/ }).click()
  await page.getByRole('link', { name: 'Overview' }).click()
  await shot('15-overview-dark')
  await page.getByRole('link', { name: 'Policies' }).click()
  await page.getByRole('link', { name: 'e2e' }).first().click()
  await page.waitForSelector('.cm-content')
  await shot('16-policies-dark')
  await page.getByRole('link', { name: 'Accounts' }).click()
  await page.waitForSelector('[data-row]')
  // The codex account that served reports usage windows: sorted by windows,
  // most used first, it leads, its windows shown in full.
  await page.getByRole('columnheader', { name: /^Windows/ }).click()
  await page.getByRole('columnheader', { name: /^Windows/ }).click()
  await waitText(page.locator('.vbody .tr .td.w-windows').first(), /%.*·.*%/, 'the usage windows of the codex account first', 20_000)
  const cutWindows = await truncated('.vtable .td.w-provider, .vtable .td.w-windows')
  check(cutWindows.length === 0, 'truncated cells: ' + JSON.stringify(cutWindows))
  await shot('17-accounts-dark')

  // Logging out ends the session.
  await page.getByRole('button', { name: 'Log out' }).click()
  await page.waitForSelector('input[name=password]')
  const me = await page.evaluate(() => fetch('/api/admin/me').then((r) => r.status))
  check(me === 401, `after logout /api/admin/me answers ${me}`)
  check(consoleErrors.length === 0, 'page errors: ' + consoleErrors.join('; '))
}

main()
  .then(async () => {
    await cleanup()
    console.log('admin UI end-to-end: ok; screenshots in', artifacts)
  })
  .catch((e) => fail(e.stack || String(e)))
