import express from 'express';
import { Pool } from 'pg';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { ipnRouter, type IpnRouter } from '../../lib/index.js';
import { adminRouter } from '../../lib/admin.js';
import { PostgresStore } from '../../lib/postgres.js';
import { CHROMIUM_ARGS, describeWithBrowser } from '../helpers/browser.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { listen, type Running } from '../helpers/servers.js';
import { databaseUrl, describeWithService, eventually } from '../helpers/services.js';

// The operator page's bulk replay ("replay what this filter shows", after its count) and its pause and
// resume, in a real browser against PostgreSQL, each confirmed through the CSRF-carrying form.

describeWithService('PostgreSQL', 'ipn-kit/admin bulk replay and pause on PostgreSQL', () => {
  describeWithBrowser(
    'the operator page replays by filter and pauses, in a real browser',
    (executablePath) => {
      let pool: Pool;
      let store: PostgresStore;
      let ipn: IpnRouter;
      let server: Running;
      let browser: Browser;
      let context: BrowserContext;
      let failing = true;
      const credited: string[] = [];
      const table = `admin_bulk_${process.pid}_${Date.now()}`;
      const batch = [1, 2].map((n) => uniquePayload({ custom_data: `batch-a-${n}` }));
      const other = uniquePayload({ custom_data: 'other-1' });
      const key = (payload: Record<string, unknown>) =>
        `${String(payload.transaction_id)}:${String(payload.state)}`;
      const post = (payload: Record<string, unknown>) =>
        fetch(`${server.url}/ipn`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(payload),
        });

      beforeAll(async () => {
        pool = new Pool({ connectionString: databaseUrl(), max: 4, idleTimeoutMillis: 500 });
        store = new PostgresStore({ pool, table });
        await store.migrate();
        ipn = ipnRouter({
          store,
          delivery: 'at-least-once',
          maxAttempts: 1,
          recoveryIntervalMs: 50,
          logger: quiet,
        });
        ipn.on('successful', (n) => {
          if (failing) throw new Error('ledger down');
          credited.push(String(n.custom_data));
        });
        const app = express();
        app.use('/ipn', ipn);
        app.use('/ops', adminRouter({ ipn, authorize: () => true, logger: quiet }));
        server = await listen(app);
        for (const payload of [...batch, other]) expect((await post(payload)).status).toBe(200);
        await eventually('three dead', async () => (await store.list({ status: 'dead' })).length === 3);
        browser = await chromium.launch({ executablePath, args: CHROMIUM_ARGS });
        context = await browser.newContext();
      }, 60_000);

      afterAll(async () => {
        await browser?.close();
        await server?.close();
        await ipn?.close();
        await pool?.query(`DROP TABLE IF EXISTS "${table}"`);
        await pool?.end();
      });

      const confirmed = async (page: Page, link: string, action: RegExp) => {
        await Promise.all([page.waitForURL(/confirm/), page.click(link)]);
        const question = await page.locator('h1').textContent();
        await Promise.all([page.waitForURL(action), page.click('#confirm')]);
        return { question, result: await page.locator('#result').textContent() };
      };

      test('replay what the filter shows: the count first, then only those entries are delivered', async () => {
        const page = await context.newPage();
        await page.goto(`${server.url}/ops/?status=dead&q=batch-a`);
        expect(await page.locator('#entries tbody tr').count()).toBe(2);
        failing = false;
        const { question, result } = await confirmed(page, '#replay-filter', /replay-filter/);
        expect(question).toMatch(/^Replay the 2 entries this filter shows\?/);
        expect(result).toBe('Replayed 2 of the 2 entries the filter showed: the list shows their progress.');
        await eventually('the batch delivered', () => credited.length === 2);
        expect(credited.sort()).toEqual(['batch-a-1', 'batch-a-2']);
        expect(await store.get(key(other))).toMatchObject({ status: 'dead' });
        // The main page follows the newest bulk replay's entries (their keys kept in the audit trail).
        await page.goto(`${server.url}/ops/`);
        expect(await page.locator('#replay-progress').textContent()).toMatch(
          /Bulk replay by unknown, .*: 2 of 2 delivered, none waiting\./,
        );
        await page.goto(`${server.url}/ops/audit`);
        expect(await page.locator('#audit').textContent()).toContain('"keys":[');
      });

      test('pause: stored and answered 200, nothing delivered, the page says so; resume delivers it', async () => {
        failing = false;
        const page = await context.newPage();
        await page.goto(`${server.url}/ops/`);
        expect(await page.locator('#paused').count()).toBe(0);
        const paused = await confirmed(page, '#pause-toggle', /\/pause$/);
        expect(paused.question).toMatch(/^Pause delivery on every instance\?/);
        expect(paused.result).toMatch(/^Delivery is paused/);
        expect(ipn.inbox.isPaused()).toBe(true);

        const late = uniquePayload({ custom_data: 'while-paused' });
        expect((await post(late)).status).toBe(200);
        await eventually('parked', async () => {
          const entry = await store.get(key(late));
          return entry?.status === 'failed' && entry.attempts === 0 && entry.leaseUntil === null;
        });
        expect(credited).not.toContain('while-paused');
        await page.goto(`${server.url}/ops/`);
        expect(await page.locator('#paused').count()).toBe(1);
        expect(await page.locator('#pause-toggle').textContent()).toBe('Resume delivery…');

        const resumed = await confirmed(page, '#pause-toggle', /\/resume$/);
        expect(resumed.result).toMatch(/^Delivery resumed/);
        await eventually('delivered on resume', () => credited.includes('while-paused'));
        expect(await store.get(key(late))).toMatchObject({ status: 'delivered' });
      });

      test('an action posted without the CSRF token is refused', async () => {
        const answer = await fetch(`${server.url}/ops/pause`, {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
          body: '',
        });
        expect(answer.status).toBe(403);
        expect(ipn.inbox.isPaused()).toBe(false);
      });
    },
  );
});
