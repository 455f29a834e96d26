import express from 'express';
import { Pool } from 'pg';
import { chromium, type Browser, type Page } from 'playwright-core';
import { ipnRouter, type IpnRouter } from '../../lib/index.js';
import { adminRouter } from '../../lib/admin.js';
import { PostgresStore } from '../../lib/postgres.js';
import { CHROMIUM_ARGS, describeWithBrowser } from '../helpers/browser.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { listen, type Running } from '../helpers/servers.js';
import { databaseUrl, describeWithService, eventually } from '../helpers/services.js';

// The operator page's audit trail, in a real browser against PostgreSQL: the operator `authorize` names
// replays the dead and purges, and the Audit trail page lists both under that name, newest first.

describeWithService('PostgreSQL', 'ipn-kit/admin audit trail on PostgreSQL', () => {
  describeWithBrowser('the operator page keeps and lists who did what', (executablePath) => {
    let pool: Pool;
    let store: PostgresStore;
    let ipn: IpnRouter;
    let server: Running;
    let browser: Browser;
    let failing = true;
    const table = `admin_audit_${process.pid}_${Date.now()}`;

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
      ipn.on('successful', () => {
        if (failing) throw new Error('not now');
      });
      ipn.on('error', () => {});
      const app = express();
      app.use('/ipn', ipn);
      app.use('/ops', adminRouter({ ipn, authorize: () => ({ actor: 'ada@example.com' }), logger: quiet }));
      app.use('/nobody', adminRouter({ ipn, authorize: () => ({ actor: '' }), logger: quiet }));
      server = await listen(app);
      const answer = await fetch(`${server.url}/ipn`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(uniquePayload()),
      });
      expect(answer.status).toBe(200);
      await eventually('one dead', async () => (await store.list({ status: 'dead' })).length === 1);
      browser = await chromium.launch({ executablePath, args: CHROMIUM_ARGS });
    }, 60_000);

    afterAll(async () => {
      await browser?.close();
      await server?.close();
      await ipn?.close();
      await pool?.query(
        `DROP TABLE IF EXISTS "${table}", "${table}_expected", "${table}_states", "${table}_audit"`,
      );
      await pool?.end();
    });

    const rows = (page: Page) =>
      page.locator('#audit tbody tr').evaluateAll(
        // Run in the page: each row's who and action cells.
        (trs) =>
          trs.map((tr) => [
            (tr as unknown as { cells: Array<{ textContent: string }> }).cells[1]!.textContent.trim(),
            (tr as unknown as { cells: Array<{ textContent: string }> }).cells[2]!.textContent.trim(),
            (tr as unknown as { cells: Array<{ textContent: string }> }).cells[3]!.textContent.trim(),
          ]),
      );

    test('a new store shows no action yet', async () => {
      const page = await browser.newPage();
      await page.goto(`${server.url}/ops/audit`);
      expect(await page.locator('#no-actions').textContent()).toBe('No operator action recorded yet.');
      await page.close();
    });

    test('replay and purge are listed under the name authorize returned, newest first', async () => {
      const page = await browser.newPage();
      await page.goto(`${server.url}/ops/`);
      failing = false;
      await Promise.all([page.waitForURL(/confirm/), page.click('text=Replay every dead entry…')]);
      await Promise.all([page.waitForURL(/replay-dead/), page.click('#confirm')]);
      expect(await page.locator('#result').textContent()).toBe(
        'Replayed 1 dead entries: the list shows their progress.',
      );
      await page.goto(`${server.url}/ops/`);
      await Promise.all([page.waitForURL(/confirm/), page.click('text=Purge delivered entries…')]);
      await page.fill('input[name=before]', '2020-01-01');
      await Promise.all([page.waitForURL(/purge/), page.click('#confirm')]);
      await page.goto(`${server.url}/ops/`);
      await Promise.all([page.waitForURL(/audit/), page.click('#audit-link')]);
      expect(await rows(page)).toEqual([
        ['ada@example.com', 'purge', '{"status":"delivered","before":"2020-01-01T00:00:00.000Z","count":0}'],
        [
          'ada@example.com',
          'replay-dead',
          expect.stringMatching(/^\{"count":1,"keys":\["[^"]+:SUCCESSFUL"\]\}$/),
        ],
      ]);
      await page.close();
    });

    test('an empty actor from authorize lets nobody in', async () => {
      expect((await fetch(`${server.url}/nobody/audit`)).status).toBe(403);
    });
  });
});
