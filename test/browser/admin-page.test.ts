import express from 'express';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Pool } from 'pg';
import { chromium, type Browser, type BrowserContext } from 'playwright-core';
import { ipnRouter, type IpnRouter } from '../../lib/index.js';
import { adminRouter } from '../../lib/admin.js';
import { PostgresStore } from '../../lib/postgres.js';
import { CHROMIUM_ARGS, describeWithBrowser } from '../helpers/browser.js';
import { uniquePayload, failedPayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { listen, type Running } from '../helpers/servers.js';
import { databaseUrl, describeWithService, eventually } from '../helpers/services.js';

const AUTH = `Basic ${Buffer.from('operator:s3cret').toString('base64')}`;
const CUSTOMER_NUMBER = '0700000001';
/** Where the README's screenshot comes from: `IPN_KIT_SCREENSHOT=1 npx jest test/browser` writes it there. */
const SCREENSHOT = process.env.IPN_KIT_SCREENSHOT
  ? join(__dirname, '../../docs/images/admin-page.png')
  : join(mkdtempSync(join(tmpdir(), 'ipn-kit-admin-')), 'admin-page.png');

describeWithService('PostgreSQL', 'ipn-kit/admin on PostgreSQL', () => {
  describeWithBrowser('the operator page in a real browser', (executablePath) => {
    let pool: Pool;
    let store: PostgresStore;
    let ipn: IpnRouter;
    let server: Running;
    let browser: Browser;
    let context: BrowserContext;
    let failing = true;
    const delivered: string[] = [];
    const table = `admin_${process.pid}_${Date.now()}`;
    const dead = uniquePayload({ custom_data: 'order-dead', amount: 700 });
    const hostile = uniquePayload({ custom_data: '<img src=x id=injected>' });
    const paid = [1, 2, 3].map((n) => uniquePayload({ custom_data: `order-${n}` }));
    const refused = failedPayload({ transaction_id: `PIX_${process.pid}1`, custom_data: 'order-9' });
    const key = (payload: Record<string, unknown>) =>
      `${String(payload.transaction_id)}:${String(payload.state)}`;

    beforeAll(async () => {
      pool = new Pool({ connectionString: databaseUrl() });
      store = new PostgresStore({ pool, table });
      await store.migrate();
      ipn = ipnRouter({
        store,
        delivery: 'at-least-once',
        maxAttempts: 1,
        recoveryIntervalMs: 50,
        logger: quiet,
      });
      const credit = (n: { custom_data: unknown }) => {
        if (n.custom_data === 'order-dead' && failing)
          throw new Error(`cannot credit ${CUSTOMER_NUMBER} now`);
        delivered.push(String(n.custom_data));
      };
      ipn.on('successful', credit);
      ipn.on('failed', credit);
      const app = express();
      app.use('/ipn', ipn);
      app.use('/ops', adminRouter({ ipn, authorize: (req) => req.headers.authorization === AUTH }));
      server = await listen(app);
      for (const payload of [...paid, refused, hostile, dead]) {
        const answer = await fetch(`${server.url}/ipn`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(payload),
        });
        expect(answer.status).toBe(200);
      }
      await eventually('the dead entry is dead', async () => (await store.get(key(dead)))?.status === 'dead');
      await eventually('five delivered', () => delivered.length === 5);
      browser = await chromium.launch({ executablePath, args: CHROMIUM_ARGS });
      context = await browser.newContext({ extraHTTPHeaders: { authorization: AUTH } });
    }, 60_000);

    afterAll(async () => {
      await browser?.close();
      await server?.close();
      await ipn?.close();
      await pool?.query(`DROP TABLE IF EXISTS "${table}"`);
      await pool?.end();
    });

    test('the list shows the seeded entries with the right counts, masked, escaped', async () => {
      const page = await context.newPage();
      await page.goto(`${server.url}/ops/`);
      const count = (status: string) => page.locator(`[data-count="${status}"] b`).textContent();
      expect(await count('delivered')).toBe('5');
      expect(await count('dead')).toBe('1');
      expect(await count('failed')).toBe('0');
      expect(await page.locator('#entries tbody tr').count()).toBe(6);
      // The hostile custom_data is shown as text, never as markup.
      expect(await page.locator('#injected').count()).toBe(0);
      expect(await page.locator('#entries').textContent()).toContain('<img src=x id=injected>');
      expect(await page.content()).not.toContain(CUSTOMER_NUMBER);
      await page.setViewportSize({ width: 1000, height: 900 });
      await page.screenshot({ path: SCREENSHOT, fullPage: true });
    });

    test('a filter narrows the list: by status, by text in custom_data, by transaction id', async () => {
      const page = await context.newPage();
      await page.goto(`${server.url}/ops/`);
      await page.selectOption('select[name=status]', 'dead');
      await page.click('button[type=submit]');
      expect(await page.locator('#entries tbody tr').count()).toBe(1);
      expect(await page.locator('#entries tbody tr').getAttribute('data-key')).toBe(key(dead));

      await page.goto(`${server.url}/ops/?q=ORDER-2`);
      expect(await page.locator('#entries tbody tr').count()).toBe(1);
      expect(await page.locator('#entries tbody tr').getAttribute('data-key')).toBe(key(paid[1]!));

      await page.goto(`${server.url}/ops/?transaction=${encodeURIComponent(String(refused.transaction_id))}`);
      expect(await page.locator('#entries tbody tr').getAttribute('data-key')).toBe(key(refused));
    });

    test("a dead entry's replay makes the app deliver it: the listener runs, the status turns delivered", async () => {
      const page = await context.newPage();
      await page.goto(`${server.url}/ops/?status=dead`);
      await page.click(`#entries a`);
      expect(await page.locator('#last-error').textContent()).toMatch(/listener|cannot credit/);
      expect(await page.content()).not.toContain(CUSTOMER_NUMBER);
      failing = false;
      await page.click('text=Replay…');
      await page.click('#confirm');
      expect(await page.locator('#result').textContent()).toContain(`Replayed ${key(dead)}`);
      await eventually(
        'the replayed entry is delivered',
        async () => (await store.get(key(dead)))?.status === 'delivered',
      );
      expect(delivered.filter((order) => order === 'order-dead')).toEqual(['order-dead']);
      await page.click('text=See the entry');
      expect(await page.locator('h1 .status').textContent()).toBe('delivered');
    });

    test('a request without authorization gets 403, pages and actions alike', async () => {
      for (const path of ['/ops/', '/ops/admin.css', `/ops/entry?key=${encodeURIComponent(key(dead))}`]) {
        expect((await fetch(`${server.url}${path}`)).status).toBe(403);
      }
      const answer = await fetch(`${server.url}/ops/replay-dead`, { method: 'POST' });
      expect(answer.status).toBe(403);
      expect(await store.get(key(dead))).toMatchObject({ status: 'delivered' });
    });

    test('a POST without the CSRF token, with a wrong one, or from another site is refused', async () => {
      const first = await fetch(`${server.url}/ops/`, { headers: { authorization: AUTH } });
      const cookie = (first.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
      const token = cookie.split('=')[1] ?? '';
      expect(token).toMatch(/^[\w-]{43}$/);
      const post = (body: string, headers: Record<string, string> = {}) =>
        fetch(`${server.url}/ops/reconcile`, {
          method: 'POST',
          headers: {
            authorization: AUTH,
            cookie,
            'content-type': 'application/x-www-form-urlencoded',
            ...headers,
          },
          body,
        });
      expect((await post('transaction=X')).status).toBe(403);
      expect((await post(`transaction=X&csrf=${'a'.repeat(43)}`)).status).toBe(403);
      expect((await post(`transaction=X&csrf=${token}`, { 'sec-fetch-site': 'cross-site' })).status).toBe(
        403,
      );
      // The right token gets through to the action (this router has no status client: a visible refusal).
      const allowed = await post(`transaction=X&csrf=${token}`);
      expect(allowed.status).toBe(409);
      expect(await allowed.text()).toContain('IPN_NO_STATUS_CLIENT');
    });
  });
});
