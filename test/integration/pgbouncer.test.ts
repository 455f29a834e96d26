import { Pool } from 'pg';
import { ipnRouter } from '../../lib/index.js';
import { PostgresStore } from '../../lib/postgres.js';
import { runCli } from '../../lib/cli/run-cli.js';
import { describeWithPgBouncer } from '../helpers/pgbouncer.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { servedRouters } from '../helpers/servers.js';
import { databaseUrl, eventually, hostAndPort } from '../helpers/services.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';
import { hostedRouter, hostedStore } from '../../examples/snippets/hosted-postgres.js';

/**
 * Hosted PostgreSQL as partners deploy it: behind a transaction-mode PgBouncer (Supabase's pooler, Neon's
 * pooled endpoint), pool of 5. The server ending a delivery's connection, a PostgreSQL restart (staged by a
 * TCP proxy between the pooler and PostgreSQL: the shared server is never restarted), a listener's session
 * `SET`, and the CLI: no crash, no loss, no double credit, no leaked setting.
 */

jest.setTimeout(60_000);
const suffix = `${process.pid}_${Date.now() % 100_000}`;
const keyOf = (payload: Record<string, unknown>) =>
  `${String(payload.transaction_id)}:${String(payload.state)}`;
const direct = new Pool({ connectionString: databaseUrl(), max: 2 });
direct.on('error', () => {});
afterAll(() => direct.end());

/** An inbox and a ledger (one row per credit, no unique key: a double credit shows) of their own. */
function tables(name: string) {
  const table = `ipn_pgb_${name}_${suffix}`;
  const ledger = `${table}_ledger`;
  beforeAll(async () => {
    await new PostgresStore({ pool: direct, table }).migrate();
    await direct.query(`CREATE TABLE ${ledger} (transaction_id text NOT NULL)`);
  });
  afterAll(() => direct.query(`DROP TABLE IF EXISTS ${table}, ${table}_expected, ${ledger}`));
  const credits = async (id: unknown) =>
    (await direct.query(`SELECT 1 FROM ${ledger} WHERE transaction_id = $1`, [id])).rowCount;
  return { table, ledger, credits };
}

describeWithPgBouncer('through a transaction-mode PgBouncer', (bouncer) => {
  const { table, ledger, credits } = tables('raw');
  const serve = servedRouters();
  let pool: Pool;
  beforeAll(() => {
    pool = new Pool({ connectionString: bouncer().url, max: 4, application_name: `ipn_pgb_${suffix}` });
    pool.on('error', () => {});
  });
  afterAll(() => pool.end());
  const router = () =>
    ipnRouter({
      store: new PostgresStore({ pool, table }),
      delivery: 'at-least-once',
      logger: quiet,
      retryDelayMs: 20,
      recoveryIntervalMs: 50,
    });

  test("a listener's SET search_path through db does not outlive its delivery: every pooled session keeps the default", async () => {
    const ipn = router();
    ipn.on('successful', async (n, { db }) => {
      await db.query('SET search_path TO pg_catalog');
      await db.query(`INSERT INTO public.${ledger} (transaction_id) VALUES ($1)`, [n.transaction_id]);
    });
    const { post } = await serve(ipn);
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await eventually('credited', async () => (await credits(payload.transaction_id)) === 1);
    // Five transactions at once hold each of the pooler's five server connections: the delivery's among them.
    const others = new Pool({ connectionString: bouncer().url, max: 5 });
    const clients = await Promise.all(Array.from({ length: 5 }, () => others.connect()));
    const paths = await Promise.all(
      clients.map(async (client) => {
        await client.query('BEGIN');
        return (await client.query<{ search_path: string }>('SHOW search_path')).rows[0]!.search_path;
      }),
    );
    await Promise.all(clients.map((client) => client.query('ROLLBACK').then(() => client.release())));
    await others.end();
    expect(paths).toEqual(Array(5).fill('"$user", public'));
  });

  test('the server ends the connection of a delivery (pg_terminate_backend): no crash; delivered, credited once', async () => {
    const ipn = router();
    let first = true;
    ipn.on('successful', async (n, { db }) => {
      await db.query(`INSERT INTO ${ledger} (transaction_id) VALUES ($1)`, [n.transaction_id]);
      if (!first) return;
      first = false;
      const { rows } = await db.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      await direct.query('SELECT pg_terminate_backend($1::int, 5000)', [rows[0]!.pid]);
    });
    const { post } = await serve(ipn);
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    const store = new PostgresStore({ pool: direct, table });
    await eventually('delivered', async () => (await store.get(keyOf(payload)))?.status === 'delivered');
    expect(await credits(payload.transaction_id)).toBe(1);
    expect(first).toBe(false);
  });

  test('ipn-kit inbox lists the inbox through the pooler', async () => {
    const lines: string[] = [];
    const code = await runCli(['inbox', 'list', '--table', table], {
      stdout: (line) => lines.push(line),
      stderr: (line) => lines.push(line),
      env: { DATABASE_URL: bouncer().url },
    });
    expect({ code, output: lines.join('\n') }).toEqual({
      code: 0,
      output: expect.stringContaining('delivered'),
    });
  });
});

describeWithPgBouncer("docs/hosted-postgres.md's recipe", (bouncer) => {
  const { table, ledger, credits } = tables('recipe');
  const serve = servedRouters();

  test('migrates on the direct URL, credits once through the pooled one with SET LOCAL', async () => {
    const { pool, store } = await hostedStore(bouncer().url, databaseUrl(), table);
    try {
      const ipn = hostedRouter(store, ledger);
      const { post } = await serve(ipn);
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      expect((await post(payload)).status).toBe(200);
      await eventually('delivered', async () => (await store.get(keyOf(payload)))?.status === 'delivered');
      expect(await credits(payload.transaction_id)).toBe(1);
    } finally {
      await pool.end();
    }
  });
});

let proxy: TcpProxy;
describeWithPgBouncer(
  'a PostgreSQL restart behind the pooler',
  (bouncer) => {
    const { table, ledger, credits } = tables('restart');
    const serve = servedRouters();
    afterAll(() => proxy?.close());

    test('every payment answered 200 during the restart is delivered and credited once', async () => {
      const pool = new Pool({ connectionString: bouncer().url, max: 4 });
      pool.on('error', () => {});
      const ipn = ipnRouter({
        store: new PostgresStore({ pool, table }),
        delivery: 'at-least-once',
        logger: quiet,
        retryDelayMs: 20,
        recoveryIntervalMs: 50,
        // An attempt whose end the store could not record (the database was gone) is taken up again when its
        // lease runs out: a short lease, so that the wait is seconds, not the default minute (flaky before).
        leaseMs: 3_000,
      });
      ipn.on('error', () => {});
      ipn.on('successful', async (n, { db }) => {
        await db.query(`INSERT INTO ${ledger} (transaction_id) VALUES ($1)`, [n.transaction_id]);
        await new Promise((resolve) => setTimeout(resolve, 50)); // in the transaction when the server goes
      });
      const { post } = await serve(ipn);
      const payloads = Array.from({ length: 20 }, () => uniquePayload());
      const answers = payloads.slice(0, 10).map((payload) => post(payload).then((r) => r.status));
      await new Promise((resolve) => setTimeout(resolve, 30));
      await proxy.stop(); // every server connection dropped, new ones refused
      const during = payloads.slice(10).map((payload) => post(payload).then((r) => r.status));
      await new Promise((resolve) => setTimeout(resolve, 300));
      await proxy.start();
      const statuses = await Promise.all([...answers, ...during]);
      // What was refused (503) the service sends again: resent now, until each is answered 200.
      for (const payload of payloads.filter((_, i) => statuses[i] !== 200)) {
        await eventually('answered 200', async () => (await post(payload)).status === 200);
      }
      const store = new PostgresStore({ pool: direct, table });
      for (const payload of payloads) {
        await eventually('delivered', async () => (await store.get(keyOf(payload)))?.status === 'delivered');
        expect(await credits(payload.transaction_id)).toBe(1);
      }
      await ipn.close();
      await pool.end();
    });
  },
  async () => {
    proxy = await TcpProxy.open(hostAndPort(databaseUrl(), 5432));
    return { host: '127.0.0.1', port: proxy.port };
  },
);
