// Measures the Accounts page with a 10,000-account pool in headless Chromium:
// `troupe demo --accounts 10000` on a free port, log in, open Accounts, scroll
// to the last row, sort by score; prints the times and how many rows the DOM
// holds (virtualized: a screenful, not 10,000). Run by `make admin-ui-10k`;
// quoted in docs/benchmarks.md. Not part of `make test` (it is a measurement).
import { chromium } from 'playwright-core'
import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { createInterface } from 'node:readline'

const bin = resolve(process.env.TROUPE_BIN || '../bin/troupe')
const dataDir = mkdtempSync(join(tmpdir(), 'troupe-10k-'))
const demo = spawn(bin, ['demo', '--listen', '127.0.0.1:0', '--accounts', '10000', '--data', dataDir], { stdio: ['ignore', 'pipe', 'ignore'] })
const vars = await new Promise((res, rej) => {
  const v = {}
  const t = setTimeout(() => rej(new Error('troupe demo did not start in 120 s')), 120_000)
  createInterface({ input: demo.stdout }).on('line', (l) => {
    const m = l.match(/^(TROUPE_[A-Z_]+)=(.*)$/)
    if (m) v[m[1]] = m[2]
    if (v.TROUPE_ADMIN_URL && v.TROUPE_ADMIN_PASSWORD) {
      clearTimeout(t)
      res(v)
    }
  })
})
const b = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
})
try {
  const p = await (await b.newContext({ viewport: { width: 1400, height: 900 } })).newPage()
  await p.goto(vars.TROUPE_ADMIN_URL)
  await p.fill('input[name=password]', vars.TROUPE_ADMIN_PASSWORD)
  await p.click('button:has-text("Log in")')
  await p.waitForSelector('[data-testid=accounts-active]')
  for (const round of [1, 2]) {
    let t = Date.now()
    await p.click('a:has-text("Accounts")')
    await p.waitForSelector('[data-row="demo-0001"]')
    const first = Date.now() - t
    t = Date.now()
    await p.evaluate(() => {
      const s = document.querySelector('[data-testid=accounts-rows]')
      s.scrollTop = s.scrollHeight
    })
    await p.waitForSelector('[data-row="demo-9999"]') // names sort bytewise: demo-9999 is last
    const bottom = Date.now() - t
    const rows = await p.locator('[data-row]').count()
    t = Date.now()
    await p.click('.th:has-text("Tier")')
    await p.waitForFunction(() => document.querySelector('.th.w-tier')?.textContent?.includes('▲'))
    await p.waitForSelector('[data-row]')
    const sorted = Date.now() - t
    console.log(`round ${round}: first rows ${first} ms, last row ${bottom} ms, sort by score ${sorted} ms, rows in the DOM ${rows} of 10000`)
    await p.click('a:has-text("Overview")')
  }
} finally {
  await b.close()
  demo.kill('SIGTERM')
  await new Promise((r) => demo.once('exit', r))
  rmSync(dataDir, { recursive: true, force: true })
}
