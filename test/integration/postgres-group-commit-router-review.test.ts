import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'pg';
import { ipnRouter } from 'ipn-kit';
import { PostgresStore, type PgQueryable } from 'ipn-kit/postgres';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { servedRouters } from '../helpers/servers.js';
import { databaseUrl, describeWithService } from '../helpers/services.js';
import { until } from '../helpers/until.js';

/** Hostile review of the group commit through the router, over real HTTP and a real PostgreSQL. */
describeWithService('PostgreSQL', 'PostgresStore group commit through the router (review)', () => {
  let pool: Pool;
  const tables: string[] = [];
  beforeAll(() => {
    pool = new Pool({ connectionString: databaseUrl(), max: 12 });
    pool.on('error', () => {});
  });
  afterAll(async () => {
    for (const table of tables) await pool.query(`DROP TABLE IF EXISTS "${table}", "${table}_expected"`);
    await pool.end();
  });

  const tableName = () => {
    const table = `ipn_gcrr_${process.pid}_${randomUUID().slice(0, 8)}`;
    tables.push(table);
    return table;
  };

  const served = servedRouters();
  async function serve(store: PostgresStore, options: Record<string, unknown> = {}) {
    const ipn = ipnRouter({
      store,
      delivery: 'at-least-once',
      logger: quiet,
      recoveryIntervalMs: 50,
      ...options,
    });
    const delivered = new Map<string, number>();
    ipn.on(
      'successful',
      (n) => void delivered.set(n.transaction_id, (delivered.get(n.transaction_id) ?? 0) + 1),
    );
    const { post: send } = await served(ipn);
    const post = async (body: unknown) => (await send(body)).status;
    return { ipn, delivered, post };
  }

  test('a burst with concurrent and late resends while deliveries settle: each payment delivered once, none left received', async () => {
    const table = tableName();
    const store = new PostgresStore({ pool, table });
    await store.migrate();
    const { delivered, post } = await serve(store);
    const payloads = Array.from({ length: 150 }, () => uniquePayload());
    const statuses: number[] = [];
    await Promise.all(
      payloads.flatMap((payload, index) => [
        post(payload).then((s) => void statuses.push(s)),
        post(payload).then((s) => void statuses.push(s)),
        sleep(index % 40).then(async () => statuses.push(await post(payload))),
      ]),
    );
    // Resend whatever was not answered 200, until each is.
    for (let round = 0; round < 5 && statuses.some((s) => s !== 200); round += 1) {
      statuses.length = 0;
      await Promise.all(payloads.map(async (p) => statuses.push(await post(p))));
    }
    await until(() => delivered.size === payloads.length, 'every payment delivered', 15_000);
    const counts = async () => store.countByStatus();
    const deadline = Date.now() + 15_000;
    while ((await counts()).received > 0 && Date.now() < deadline) await sleep(50);
    expect(await counts()).toEqual({ received: 0, delivered: payloads.length, failed: 0, dead: 0 });
    await sleep(300); // anything delivered twice shows by now
    expect([...delivered.values()].filter((count) => count !== 1)).toEqual([]);
  }, 60_000);

  test('a batch answered after the stall escape: requests answered 503, resends duplicates, each delivered once', async () => {
    const table = tableName();
    let stallNext = false;
    let stalledBatches = 0;
    const wrapped: PgQueryable = {
      query: async (text, values) => {
        if (stallNext && text.includes('unnest')) {
          stallNext = false;
          stalledBatches += 1;
          const result = await pool.query(text, values); // committed at once...
          await sleep(7_000); // ...answered after storeTimeout and STALLED_BATCH_MS
          return result;
        }
        return pool.query(text, values);
      },
    };
    const store = new PostgresStore({ pool: wrapped, table });
    await store.migrate();
    const { delivered, post } = await serve(store);
    const payloads = Array.from({ length: 20 }, () => uniquePayload());
    stallNext = true;
    const first = await Promise.all(payloads.map((p) => post(p)));
    expect(stalledBatches).toBe(1);
    const answered503 = payloads.filter((_, i) => first[i] === 503);
    expect(answered503.length).toBeGreaterThan(0);
    // The service resends at once: the batcher has given up the stalled place, the rows are there.
    expect(await Promise.all(answered503.map((p) => post(p)))).toEqual(answered503.map(() => 200));
    await until(() => delivered.size === payloads.length, 'every payment delivered', 15_000);
    await sleep(500);
    expect([...delivered.values()].filter((count) => count !== 1)).toEqual([]);
    expect(await store.countByStatus()).toEqual({
      received: 0,
      delivered: payloads.length,
      failed: 0,
      dead: 0,
    });
  }, 30_000);

  test('a batch that reaches PostgreSQL only after the stall escape: resends stored and delivered, the late insert changes nothing', async () => {
    const table = tableName();
    let stallNext = false;
    const wrapped: PgQueryable = {
      query: async (text, values) => {
        if (stallNext && text.includes('unnest')) {
          stallNext = false;
          await sleep(7_000); // stuck before it reaches the server, then runs
        }
        return pool.query(text, values);
      },
    };
    const store = new PostgresStore({ pool: wrapped, table });
    await store.migrate();
    const { delivered, post } = await serve(store);
    const payloads = Array.from({ length: 20 }, () => uniquePayload());
    stallNext = true;
    const first = await Promise.all(payloads.map((p) => post(p)));
    const answered503 = payloads.filter((_, i) => first[i] === 503);
    expect(answered503.length).toBeGreaterThan(0);
    expect(await Promise.all(answered503.map((p) => post(p)))).toEqual(answered503.map(() => 200));
    await until(() => delivered.size === payloads.length, 'every payment delivered', 15_000);
    await sleep(3_000); // the stuck batch lands meanwhile
    expect([...delivered.values()].filter((count) => count !== 1)).toEqual([]);
    expect(await store.countByStatus()).toEqual({
      received: 0,
      delivered: payloads.length,
      failed: 0,
      dead: 0,
    });
  }, 30_000);
  test('the same burst with listeners writing through db (transactional marks beside batched receives): one ledger row each', async () => {
    const table = tableName();
    const ledger = `${table}_ledger`;
    tables.push(ledger);
    await pool.query(
      `CREATE TABLE "${ledger}" (transaction_id text PRIMARY KEY, credits int NOT NULL DEFAULT 1)`,
    );
    const store = new PostgresStore({ pool, table });
    await store.migrate();
    const { ipn, post } = await serve(store);
    ipn.on('successful', async (n, { db }) => {
      await (db as unknown as Pool).query(
        `INSERT INTO "${ledger}" (transaction_id) VALUES ($1) ON CONFLICT (transaction_id) DO UPDATE SET credits = "${ledger}".credits + 1`,
        [n.transaction_id],
      );
    });
    const payloads = Array.from({ length: 100 }, () => uniquePayload());
    const statuses = await Promise.all(
      payloads.flatMap((payload, index) => [post(payload), sleep(index % 30).then(() => post(payload))]),
    );
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
    const deadline = Date.now() + 20_000;
    while ((await store.countByStatus()).delivered < payloads.length && Date.now() < deadline)
      await sleep(50);
    expect(await store.countByStatus()).toEqual({
      received: 0,
      delivered: payloads.length,
      failed: 0,
      dead: 0,
    });
    const { rows } = await pool.query(
      `SELECT count(*)::int AS n, max(credits)::int AS most FROM "${ledger}"`,
    );
    expect(rows[0]).toEqual({ n: payloads.length, most: 1 });
  }, 60_000);
});
