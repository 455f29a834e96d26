import express from 'express';
import { Pool } from 'pg';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { createStatusClient, ipnRouter, type IpnRouter } from '../../lib/index.js';
import { adminRouter } from '../../lib/admin.js';
import { PostgresStore } from '../../lib/postgres.js';
import { createFakeProvider, type FakeProvider } from '../../lib/testing.js';
import { CHROMIUM_ARGS, describeWithBrowser } from '../helpers/browser.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { listen, type Running } from '../helpers/servers.js';
import { databaseUrl, describeWithService, eventually } from '../helpers/services.js';

// The operator page's other actions and views, in a real browser against PostgreSQL: reconcile by hand
// through the status client and its guard, replay every dead entry, purge before a date (each confirmed,
// each with a visible result), the last hour's counts, a date range, paging, and a phone-sized screen.

const API_KEY = 'admin-actions-key';

describeWithService('PostgreSQL', 'ipn-kit/admin actions on PostgreSQL', () => {
  describeWithBrowser('the operator page acts, in a real browser', (executablePath) => {
    let pool: Pool;
    let store: PostgresStore;
    let ipn: IpnRouter;
    let provider: FakeProvider;
    let server: Running;
    let browser: Browser;
    let context: BrowserContext;
    let failing = true;
    const credited: string[] = [];
    const table = `admin_actions_${process.pid}_${Date.now()}`;
    const dead = [1, 2].map((n) => uniquePayload({ custom_data: `dead-${n}` }));
    const old = uniquePayload({ custom_data: 'old-1' });
    const recent = [1, 2, 3].map((n) => uniquePayload({ custom_data: `recent-${n}` }));
    const key = (payload: Record<string, unknown>) =>
      `${String(payload.transaction_id)}:${String(payload.state)}`;

    beforeAll(async () => {
      provider = await createFakeProvider({ apiKey: API_KEY });
      pool = new Pool({ connectionString: databaseUrl() });
      store = new PostgresStore({ pool, table });
      await store.migrate();
      const verify = createStatusClient({
        baseUrl: provider.statusBaseUrl,
        apiKey: API_KEY,
        maxQueriesPerMinute: 5,
        logger: quiet,
      });
      // No verify on receipt (the seeded notifications are the tests' own); reconcile uses the client.
      ipn = ipnRouter({
        store,
        delivery: 'at-least-once',
        maxAttempts: 1,
        recoveryIntervalMs: 50,
        logger: quiet,
      });
      const withVerify = ipnRouter({ store, delivery: 'at-least-once', verify, logger: quiet });
      const credit = (n: { custom_data: unknown; transaction_id: string }) => {
        if (String(n.custom_data).startsWith('dead-') && failing) throw new Error('not now');
        credited.push(String(n.custom_data));
      };
      ipn.on('successful', credit);
      withVerify.on('successful', credit);
      const app = express();
      app.use('/ipn', ipn);
      app.use('/ops', adminRouter({ ipn, authorize: () => true, pageSize: 2, logger: quiet }));
      app.use('/verified-ops', adminRouter({ ipn: withVerify, authorize: () => true, logger: quiet }));
      server = await listen(app);
      for (const payload of [...dead, old, ...recent]) {
        const answer = await fetch(`${server.url}/ipn`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(payload),
        });
        expect(answer.status).toBe(200);
      }
      await eventually('two dead', async () => (await store.list({ status: 'dead' })).length === 2);
      await eventually('four delivered', () => credited.length === 4);
      // The old one arrived and was delivered ten days ago.
      await pool.query(
        `UPDATE "${table}" SET received_at = now() - interval '10 days', delivered_at = now() - interval '10 days' WHERE key = $1`,
        [key(old)],
      );
      browser = await chromium.launch({ executablePath, args: CHROMIUM_ARGS });
      context = await browser.newContext();
      afterAllClose.push(() => withVerify.close());
    }, 60_000);

    const afterAllClose: Array<() => Promise<void>> = [];
    afterAll(async () => {
      await browser?.close();
      await server?.close();
      await ipn?.close();
      for (const close of afterAllClose) await close();
      await provider?.close();
      await pool?.query(`DROP TABLE IF EXISTS "${table}"`);
      await pool?.end();
    });

    const count = (page: Page, status: string) => page.locator(`[data-count="${status}"] b`).textContent();
    const lastHour = (page: Page, status: string) =>
      page.locator(`[data-count="${status}"] small`).nth(1).textContent();

    test('counts in all and for the last hour; a date range and paging narrow the list', async () => {
      const page = await context.newPage();
      await page.goto(`${server.url}/ops/`);
      expect(await count(page, 'delivered')).toBe('4');
      expect(await lastHour(page, 'delivered')).toBe('3 in the last hour');
      expect(await count(page, 'dead')).toBe('2');
      // 6 entries, 2 a page, newest first: three pages.
      expect(await page.locator('#entries tbody tr').count()).toBe(2);
      await Promise.all([page.waitForURL(/page=2/), page.click('text=Older →')]);
      expect(await page.locator('#entries tbody tr').count()).toBe(2);
      await Promise.all([page.waitForURL(/page=3/), page.click('text=Older →')]);
      expect(await page.locator('#entries tbody tr').count()).toBe(2);
      expect(await page.locator('text=Older →').count()).toBe(0);
      expect(await page.locator('#entries tbody tr').last().getAttribute('data-key')).toBe(key(old));
      const tenDaysAgo = new Date(Date.now() - 10 * 24 * 3600 * 1000).toISOString().slice(0, 10);
      await page.goto(`${server.url}/ops/?from=${tenDaysAgo}&to=${tenDaysAgo}`);
      expect(await page.locator('#entries tbody tr').count()).toBe(1);
      expect(await page.locator('#entries tbody tr').getAttribute('data-key')).toBe(key(old));
    });

    test('on a phone-sized screen the page fits its width and every action is reachable', async () => {
      const phone = await browser.newContext({ viewport: { width: 375, height: 740 }, isMobile: true });
      const page = await phone.newPage();
      await page.goto(`${server.url}/ops/`);
      // Run in the page, where `document` is (this file is type-checked without the DOM's types).
      const overflow = await page.evaluate(
        'document.documentElement.scrollWidth - document.documentElement.clientWidth',
      );
      expect(overflow).toBeLessThanOrEqual(0);
      for (const action of ['Replay every dead entry…', 'Purge delivered entries…', 'Reconcile…']) {
        expect(await page.locator(`text=${action}`).isVisible()).toBe(true);
      }
      await phone.close();
    });

    test('replay every dead entry: confirmed, done, and the app delivers them', async () => {
      const page = await context.newPage();
      await page.goto(`${server.url}/ops/`);
      failing = false;
      await Promise.all([page.waitForURL(/confirm/), page.click('text=Replay every dead entry…')]);
      expect(await page.locator('h1').textContent()).toMatch(/Replay every dead entry\?/);
      await Promise.all([page.waitForURL(/replay-dead/), page.click('#confirm')]);
      expect(await page.locator('#result').textContent()).toBe(
        'Replayed 2 dead entries: the list shows their progress.',
      );
      await eventually('both delivered', () => credited.filter((c) => c.startsWith('dead-')).length === 2);
      await eventually('no dead left', async () => (await store.list({ status: 'dead' })).length === 0);
    });

    test('purge delivered entries before a date: confirmed with the date, done, only the old one gone', async () => {
      const page = await context.newPage();
      await page.goto(`${server.url}/ops/`);
      await Promise.all([page.waitForURL(/confirm/), page.click('text=Purge delivered entries…')]);
      // Before the dedupe window (ttlMs, 7 days): a later date is refused unless its box is ticked.
      const eightDaysAgo = new Date(Date.now() - 8 * 24 * 3600 * 1000).toISOString().slice(0, 10);
      await page.fill('input[name=before]', eightDaysAgo);
      await Promise.all([page.waitForURL(/purge/), page.click('#confirm')]);
      expect(await page.locator('#result').textContent()).toBe(
        `Purged 1 delivered entries delivered before ${eightDaysAgo}.`,
      );
      expect(await store.get(key(old))).toBeUndefined();
      expect(await store.get(key(recent[0]!))).toMatchObject({ status: 'delivered' });
    });

    test('reconcile by hand goes through the status client and its guard, and shows the budget left', async () => {
      const { transactionId } = provider.initiate({
        amount: 4200,
        ipnUrl: 'http://127.0.0.1:9/ipn',
        customData: 'by-hand',
        outcome: 'SUCCESSFUL',
        deliver: false,
      });
      await new Promise((resolve) => setTimeout(resolve, 5));
      const page = await context.newPage();
      await page.goto(`${server.url}/verified-ops/`);
      await page.fill('form[action$="/confirm"] input[name=transaction]', transactionId);
      await Promise.all([page.waitForURL(/confirm/), page.click('text=Reconcile…')]);
      expect(await page.locator('h1').textContent()).toContain(transactionId);
      await Promise.all([page.waitForURL(/reconcile/), page.click('#confirm')]);
      expect(await page.locator('#result').textContent()).toBe(
        `The service says ${transactionId} is SUCCESSFUL: its notification was delivered now.`,
      );
      await eventually('credited', () => credited.includes('by-hand'));
      expect(provider.statusQueriesFor(transactionId)).toBe(1);
      await page.goto(`${server.url}/verified-ops/`);
      expect(await page.locator('[data-metric="query budget left (this minute)"] b').textContent()).toBe('4');
    });
  });
});
