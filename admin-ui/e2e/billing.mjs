// The billing admin pages end to end (run by run.mjs against its `troupe
// demo`, logged in as the admin): Prices (a price set as decimal strings, a
// bad one refused in the form, a group multiplier), Registration (invite
// mode, an invitation code shown once and used by a registration through
// the console API, then revoked), Users (search, a top-up with a note, the
// ledger, limits, disable refusing the user's key at once, enable), and
// Spend (the user's request charged, chart and table agreeing to the
// micro-unit with the balance the ledger lost). Screenshots 20-* go with
// the others.

/** micro reads a decimal string into BigInt micro-units (as the UI does; no floats). */
function micro(s) {
  const m = /^(-?)(\d+)(?:\.(\d{1,6}))?$/.exec(s.trim())
  if (!m) throw new Error(`not an amount: ${JSON.stringify(s)}`)
  const v = BigInt(m[2]) * 1_000_000n + BigInt((m[3] ?? '').padEnd(6, '0'))
  return m[1] ? -v : v
}

/** overflowing lists the selector's elements whose content is wider than they are. */
async function overflowing(page, selector) {
  return page.evaluate((sel) => [...document.querySelectorAll(sel)].filter((e) => e.scrollWidth > e.clientWidth + 1).map((e) => e.getAttribute('data-testid') || e.className), selector)
}

export async function billingPages({ page, env, shot, waitText, check }) {
  const origin = new URL(env.TROUPE_ADMIN_URL).origin
  const admin = (path) => page.evaluate((p) => fetch('/api/admin/' + p).then((r) => r.json()), path)

  // Prices: a bad price is refused in the form, a good one is stored as typed.
  await page.getByRole('link', { name: 'Prices' }).click()
  await page.getByRole('button', { name: 'Set price' }).click()
  await page.locator('.modal input[name=model]').fill('gpt-4.1-mini')
  await page.locator('.modal input[name=input]').fill('4e-1')
  await page.locator('.modal input[name=output]').fill('1.6')
  await page.getByRole('button', { name: 'Save' }).click()
  await waitText(page.locator('.modal .error'), /Input price is a decimal/, 'a price with an exponent refused in the form')
  await page.locator('.modal input[name=input]').fill('0.4')
  await page.locator('.modal input[name=cached_input]').fill('0.1')
  {
    const p = await page.locator('.modal input[name=cache_write]').getAttribute('placeholder')
    check(p === '0.50 (input × 1.25)', `the default cache-write price shown: ${p}`)
  }
  await shot('20-price-form')
  await page.getByRole('button', { name: 'Save' }).click()
  await waitText(page.locator('[data-price="gpt-4.1-mini"]'), /0\.40\s*0\.10\s*0\.50\s*1\.60\s*USD/, 'the price in the table')
  const stored = (await admin('prices')).prices.find((p) => p.model === 'gpt-4.1-mini')
  check(stored && stored.input === '0.400000' && stored.cache_write === '0.500000' && stored.output === '1.600000', `the stored price: ${JSON.stringify(stored)}`)
  await page.locator('input[name=price-group]').fill('gold')
  await page.locator('input[name=multiplier]').fill('0.8')
  await page.getByRole('button', { name: 'Set multiplier' }).click()
  await waitText(page.locator('[data-group="gold"]'), /× 0\.8/, 'the gold multiplier')
  await shot('20-prices')

  // Registration: invite mode, a code shown once, redeemed by a registration.
  await page.getByRole('link', { name: 'Registration' }).click()
  // The radio follows the server: it turns checked once the PUT answered.
  await page.locator('input[name=registration][value=invite]').click()
  await page.locator('input[name=registration][value=invite]:checked').waitFor()
  await page.waitForFunction(() => fetch('/api/admin/registration').then((r) => r.json()).then((j) => j.mode === 'invite'))
  await page.getByRole('button', { name: 'Create invitation' }).click()
  await page.locator('.modal input[name=max_uses]').fill('2')
  await page.locator('.modal input[name=note]').fill('e2e alice')
  await page.getByRole('button', { name: 'Create', exact: true }).click()
  const code = (await waitText(page.getByTestId('new-invitation'), /^inv-/, 'the invitation code')).trim()
  await shot('21-invitation-code')
  await page.getByRole('button', { name: 'Done' }).click()
  check(!(await page.content()).includes(code), 'the invitation code is still on the page after Done')
  const prefix = code.slice(0, 8)
  await waitText(page.locator(`[data-invitation="${prefix}"]`), /active.*e2e alice.*0 of 2/, 'the invitation in the list')
  const password = 'e2e-alice-password-1'
  const consoleCall = async (method, path, body, cookie, csrf) => {
    const headers = { 'Content-Type': 'application/json', Origin: origin }
    if (cookie) headers.Cookie = cookie
    if (csrf) headers['X-CSRF-Token'] = csrf
    const r = await fetch(origin + '/api/console/' + path, { method, headers, body: body && JSON.stringify(body) })
    return { status: r.status, json: await r.json().catch(() => null), cookie: r.headers.get('set-cookie')?.split(';')[0] }
  }
  {
    const r = await consoleCall('POST', 'register', { name: 'e2e-alice', password, invitation: code })
    check(r.status === 201, `registration with the code: ${r.status} ${JSON.stringify(r.json)}`)
  }
  await waitText(page.locator(`[data-invitation="${prefix}"]`), /1 of 2/, 'the invitation used once', 45_000)
  await shot('21-registration')

  // The user's own key, from the console API.
  const login = await consoleCall('POST', 'login', { name: 'e2e-alice', password })
  check(login.status === 200 && login.cookie, `console login: ${login.status} ${JSON.stringify(login.json)}`)
  const made = await consoleCall('POST', 'keys', { name: 'e2e' }, login.cookie, login.json.csrf_token)
  check(made.status === 201 && made.json.secret, `console key: ${made.status} ${JSON.stringify(made.json)}`)
  const userKey = made.json.secret
  const chat = () =>
    fetch(env.TROUPE_BASE_URL + '/chat/completions', {
      method: 'POST',
      headers: { Authorization: 'Bearer ' + userKey, 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4.1-mini', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] }),
    })
  {
    const r = await chat()
    check(r.status === 429, `a request of a user with no balance: ${r.status} (want 429 insufficient_quota)`)
    const j = await r.json()
    check(j.error?.code === 'insufficient_quota', `the refusal: ${JSON.stringify(j)}`)
  }

  // Users: search, top up with a note, see the ledger, edit limits.
  await page.getByRole('link', { name: 'Users' }).click()
  await page.locator('input[name=q]').fill('alice')
  await waitText(page.getByTestId('users-count'), /^1 user$/, 'search for the registered user')
  await page.locator('[data-user="e2e-alice"]').click()
  await waitText(page.getByTestId('user-balance'), /^0\.00$/, 'the new user has nothing')
  await page.locator('[data-testid=ledger-form] input[name=amount]').fill('2.500001')
  await page.getByRole('button', { name: 'Top up' }).click()
  await waitText(page.locator('[data-testid=ledger-form] .error'), /note saying why is required/, 'a top-up without a note refused')
  await page.locator('[data-testid=ledger-form] input[name=note]').fill('e2e invoice 1')
  await page.getByRole('button', { name: 'Top up' }).click()
  await waitText(page.getByTestId('user-balance'), /^2\.500001$/, 'the balance after the top-up')
  await waitText(page.getByTestId('ledger'), /topup\s*\+2\.500001\s*admin:\S+\s*e2e invoice 1/, 'the top-up in the ledger')
  await waitText(page.locator('[data-user="e2e-alice"] [data-testid=balance]'), /^2\.500001$/, 'the balance in the table')
  await page.locator('[data-testid=limits-form] input[name=group]').fill('gold')
  await page.locator('[data-testid=limits-form] input[name=rpm]').fill('120')
  await page.locator('[data-testid=limits-form] input[name=models]').fill('gpt-4.1-mini')
  await page.locator('[data-testid=limits-form] button', { hasText: 'Save' }).click()
  await waitText(page.locator('[data-user="e2e-alice"]'), /gold\s*gpt-4\.1-mini\s*120/, 'the group, allowlist and RPM in the table')
  check((await overflowing(page, '[data-testid=user-panel]')).length === 0, 'the user panel overflows sideways')
  await shot('22-user-panel')

  // Two requests on the user's key, charged at the gold price.
  for (let i = 0; i < 2; i++) {
    const r = await chat()
    const body = await r.text()
    check(r.status === 200, `the user's key: ${r.status} ${body}`)
  }
  let balance = ''
  {
    const end = Date.now() + 30_000
    for (;;) {
      const u = await admin('users/e2e-alice')
      balance = u.user.balance
      if (u.ledger.filter((r) => r.kind === 'charge').length === 2) break
      check(Date.now() < end, `the two charges were not stored in 30 s: ${JSON.stringify(u.ledger)}`)
      await page.waitForTimeout(200)
    }
  }
  const spent = micro('2.500001') - micro(balance)
  check(spent > 0n, `the requests cost nothing: balance ${balance}`)

  // Disable: the key is refused at once; enable again.
  page.once('dialog', (d) => d.accept())
  await page.locator('[data-testid=user-panel] .head button', { hasText: 'Disable' }).click()
  await waitText(page.getByTestId('user-state'), /^disabled$/, 'the user disabled')
  {
    const r = await chat()
    check(r.status === 401, `the key of a disabled user: ${r.status}`)
  }
  await page.locator('[data-testid=user-panel] .head button', { hasText: 'Enable' }).click()
  await waitText(page.getByTestId('user-state'), /^active$/, 'the user enabled')
  // Disable sends the user's version: a user changed since the panel read it is refused,
  // 409 edit_conflict, with the server's "changed by someone else … Reload" message.
  {
    const status = await page.evaluate(async () => {
      const me = await fetch('/api/admin/me').then((r) => r.json())
      const r = await fetch('/api/admin/users/e2e-alice', {
        method: 'PATCH',
        headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': me.csrf_token },
        body: JSON.stringify({ max_concurrency: 50 }),
      })
      return r.status
    })
    check(status === 200, `a change of the user behind the panel: ${status}`)
    page.once('dialog', (d) => d.accept())
    await page.locator('[data-testid=user-panel] .head button', { hasText: 'Disable' }).click()
    await waitText(page.getByTestId('user-panel'), /changed by someone else since you read it.*Reload/, 'a stale user edit refused')
    await waitText(page.getByTestId('user-state'), /^active$/, 'the user still active')
    const u = await admin('users/e2e-alice')
    check(u.user.disabled === false && u.user.max_concurrency === 50, `the other change kept: ${JSON.stringify(u.user)}`)
  }
  await shot('22-users')
  await page.locator('[data-testid=user-panel] button[aria-label=Close]').click()
  await page.locator('input[name=q]').fill('')

  // Spend: the chart and the table agree with what the ledger lost.
  await page.getByRole('link', { name: 'Spend' }).click()
  // Requests refused for money or a disabled user are counted too, at no cost.
  await waitText(page.getByTestId('spend-requests'), /^[2-9]$/, "the user's requests on the Spend page")
  const total = await page.getByTestId('spend-total').textContent()
  check(micro(total) === spent, `spend total ${total}, the balance lost ${spent} micro-units`)
  const row = await page.locator('[data-spend="e2e-alice/gpt-4.1-mini"] [data-testid=spend-cost]').textContent()
  check(micro(row) === spent, `the spend row's cost ${row}, want ${spent} micro-units`)
  await page.waitForSelector('[data-testid=spend-chart] canvas')
  await waitText(page.getByTestId('spend-chart'), /gpt-4\.1-mini\s*\d+\.\d{2}/, 'the model in the spend legend with its total')
  await page.locator('select[name=by]').selectOption('user')
  await waitText(page.getByTestId('chart-legend'), /e2e-alice\s*\d+\.\d{2}/, 'the user in the spend legend')
  const legend = await page.getByTestId('legend-e2e-alice').textContent()
  check(micro(legend) === spent, `the legend's total ${legend}, want ${spent} micro-units`)
  await shot('23-spend')

  // The invitation revoked; registration closed again.
  await page.getByRole('link', { name: 'Registration' }).click()
  page.once('dialog', (d) => d.accept())
  await page.locator(`[data-invitation="${prefix}"] button`, { hasText: 'Revoke' }).click()
  await waitText(page.locator(`[data-invitation="${prefix}"]`), /revoked/, 'the invitation revoked')
  {
    const r = await consoleCall('POST', 'register', { name: 'e2e-bob', password, invitation: code })
    check(r.status === 403, `a registration with a revoked code: ${r.status}`)
  }
  // The radio follows the server: it turns checked once the PUT answered.
  await page.locator('input[name=registration][value=closed]').click()
  await page.locator('input[name=registration][value=closed]:checked').waitFor()
  await page.waitForFunction(() => fetch('/api/admin/registration').then((r) => r.json()).then((j) => j.mode === 'closed'))
  console.log('billing pages: a user registered by invitation, topped up, charged', balance, 'left; spend agrees')
}
