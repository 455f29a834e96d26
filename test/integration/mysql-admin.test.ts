import { createPool, type Pool } from 'mysql2/promise';
import { ipnRouter } from 'ipn-kit';
import { adminRouter } from 'ipn-kit/admin';
import { MysqlStore } from 'ipn-kit/mysql';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { EXPRESS_VERSIONS, listen, type Running } from '../helpers/servers.js';
import { describeWithService, eventually, mysqlUrl } from '../helpers/services.js';

jest.setTimeout(30_000);

// The operator's page (ipn-kit/admin) over a MysqlStore inbox: it lists, filters, counts and shows the
// entries MySQL holds, and a replay through its form delivers again.
describeWithService('MariaDB', 'the operator page over MysqlStore', () => {
  const [, express] = EXPRESS_VERSIONS[0]!;
  const table = `ipn_myadmin_${process.pid}_${Date.now() % 100_000}`;
  let pool: Pool;
  let server: Running | undefined;
  let close: (() => Promise<void>) | undefined;
  beforeAll(async () => {
    pool = createPool({ uri: mysqlUrl(), connectionLimit: 4 });
    await new MysqlStore({ pool, table }).migrate();
  });
  afterEach(async () => {
    await server?.close();
    await close?.();
  });
  afterAll(async () => {
    await pool.query(`DROP TABLE IF EXISTS ${table}, ${table}_expected`);
    await pool.end();
  });

  test('lists, filters and shows the entries, the customer masked; a replay through its form delivers', async () => {
    const store = new MysqlStore({ pool, table });
    // maxAttempts 1: a notification whose listener fails is dead at once, for the operator to replay.
    const ipn = ipnRouter({
      store,
      delivery: 'at-least-once',
      maxAttempts: 1,
      recoveryIntervalMs: 20,
      logger: quiet,
    });
    close = () => ipn.close();
    let ledgerUp = false;
    const delivered: string[] = [];
    ipn.on('successful', (n) => {
      if (!ledgerUp) throw new Error(`ledger down for ${String(n.destination)}`);
      delivered.push(n.transaction_id);
    });
    const app = express();
    app.use('/ipn', ipn);
    app.use('/admin', adminRouter({ ipn, authorize: () => true }));
    server = await listen(app);
    const url = server.url;
    const post = (body: unknown) =>
      fetch(`${url}/ipn`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });

    const dead = uniquePayload({ destination: '22997000111', custom_data: `order-dead-${process.pid}` });
    const fine = uniquePayload({ custom_data: `order-fine-${process.pid}` });
    const deadKey = `${String(dead.transaction_id)}:SUCCESSFUL`;
    const fineKey = `${String(fine.transaction_id)}:SUCCESSFUL`;
    /** The keys of the inbox's rows a page lists (the recent errors beside them name transactions too). */
    const listed = (page: string) =>
      [...page.matchAll(/href="\/admin\/entry\?key=([^"]+)"/g)].map((match) => decodeURIComponent(match[1]!));
    expect((await post(dead)).status).toBe(200);
    await eventually('the dead entry', async () => (await store.get(deadKey))?.status === 'dead');
    ledgerUp = true;
    expect((await post(fine)).status).toBe(200);
    await eventually('the delivered entry', async () => (await store.get(fineKey))?.status === 'delivered');
    ledgerUp = false;

    // The overview: both entries, counted by status, the customer's number masked.
    const overview = await fetch(`${url}/admin/`);
    expect(overview.status).toBe(200);
    const text = await overview.text();
    expect(listed(text)).toEqual([fineKey, deadKey]); // newest first
    expect(text).toMatch(/data-count="dead">\s*<small>dead<\/small><b>1<\/b/);
    expect(text).toMatch(/data-count="delivered">\s*<small>delivered<\/small><b>1<\/b/);
    expect(text).not.toContain('22997000111');
    // The filters reach MySQL: by status, and by text in custom_data.
    const deadOnly = await (await fetch(`${url}/admin/?status=dead`)).text();
    expect(listed(deadOnly)).toEqual([deadKey]);
    const searched = await (await fetch(`${url}/admin/?q=${encodeURIComponent('ORDER-FINE')}`)).text();
    expect(listed(searched)).toEqual([fineKey]);
    const byId = await (await fetch(`${url}/admin/?transaction=${String(dead.transaction_id)}`)).text();
    expect(listed(byId)).toEqual([deadKey]);

    // The entry's page: its last error, masked.
    const entry = await fetch(`${url}/admin/entry?key=${encodeURIComponent(deadKey)}`);
    expect(entry.status).toBe(200);
    const entryText = await entry.text();
    expect(entryText).toContain('ledger down for [redacted]');
    expect(entryText).not.toContain('22997000111');
    expect((await fetch(`${url}/admin/entry?key=${encodeURIComponent('TX.none:SUCCESSFUL')}`)).status).toBe(
      404,
    );

    // Replay, through the confirmation's form (its CSRF token and cookie): the entry is delivered.
    ledgerUp = true;
    const confirm = await fetch(`${url}/admin/confirm?action=replay&key=${encodeURIComponent(deadKey)}`);
    expect(confirm.status).toBe(200);
    const cookie = (confirm.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
    const token = cookie.split('=')[1] ?? '';
    const replayed = await fetch(`${url}/admin/replay`, {
      method: 'POST',
      headers: { cookie, 'content-type': 'application/x-www-form-urlencoded' },
      body: `csrf=${token}&key=${encodeURIComponent(deadKey)}`,
    });
    expect(replayed.status).toBe(200);
    expect(await replayed.text()).toContain(`Replayed ${deadKey}`);
    await eventually(
      'the replayed entry delivered',
      async () => (await store.get(deadKey))?.status === 'delivered',
    );
    expect(delivered).toEqual([fine.transaction_id, dead.transaction_id]);
  });
});
