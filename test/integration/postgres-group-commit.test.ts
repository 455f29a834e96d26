import { randomUUID } from 'node:crypto';
import { Pool } from 'pg';
import { ipnRouter } from 'ipn-kit';
import { PostgresStore, type PgQueryable } from 'ipn-kit/postgres';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { servedRouters } from '../helpers/servers.js';
import { databaseUrl, describeWithService } from '../helpers/services.js';
import { until } from '../helpers/until.js';

describeWithService('PostgreSQL', 'PostgresStore group commit', () => {
  let pool: Pool;
  const tables: string[] = [];
  beforeAll(() => {
    pool = new Pool({ connectionString: databaseUrl(), max: 6 });
    pool.on('error', () => {});
  });
  afterAll(async () => {
    for (const table of tables) await pool.query(`DROP TABLE IF EXISTS "${table}"`);
    await pool.end();
  });

  /** A store on a fresh table, over a pool that counts its statements and can fail the next batch. */
  async function fresh() {
    const table = `ipn_gc_${process.pid}_${randomUUID().slice(0, 8)}`;
    tables.push(table);
    const statements: string[] = [];
    let failBatches = 0;
    const counted: PgQueryable = {
      query: (text, values) => {
        statements.push(text);
        if (text.includes('unnest') && failBatches > 0) {
          failBatches -= 1;
          return Promise.reject(new Error('the batch failed (injected)'));
        }
        return pool.query(text, values);
      },
    };
    const store = new PostgresStore({ pool: counted, table });
    await store.migrate();
    const batches = () => statements.filter((text) => text.includes('unnest')).length;
    return { store, table, batches, statements, failNextBatch: () => (failBatches += 1) };
  }
  const lease = () => ({ id: randomUUID(), ms: 60_000 });

  test('concurrent receives go as fewer statements than receives; each is told whether it stored', async () => {
    const { store, table, batches } = await fresh();
    const keys = Array.from({ length: 40 }, (_, index) => `GC.${index}:SUCCESSFUL`);
    const results = await Promise.all(keys.map((key) => store.receive(key, { n: key }, lease())));
    expect(results).toEqual(keys.map(() => true));
    expect(batches()).toBeGreaterThan(0);
    expect(batches()).toBeLessThan(40);
    const { rows } = await pool.query(`SELECT count(*)::int AS n FROM "${table}" WHERE status = 'received'`);
    expect(rows[0].n).toBe(40);
    // Resends, in a batch of their own: none is stored again.
    expect(await Promise.all(keys.map((key) => store.receive(key, {}, lease())))).toEqual(
      keys.map(() => false),
    );
  });

  test('one key twice in a batch is stored once, and only one of its callers is told so', async () => {
    const { store } = await fresh();
    const results = await Promise.all([
      store.receive('SAME:SUCCESSFUL', { copy: 1 }, lease()),
      store.receive('OTHER:SUCCESSFUL', {}, lease()),
      store.receive('SAME:SUCCESSFUL', { copy: 2 }, lease()),
      store.receive('SAME:SUCCESSFUL', { copy: 3 }, lease()),
    ]);
    expect(results.filter(Boolean)).toHaveLength(2);
    expect(results[1]).toBe(true);
  });

  test('concurrent delivered settlements are batched, each guarded by its own lease', async () => {
    const { store, batches } = await fresh();
    const held = Array.from({ length: 20 }, (_, index) => ({ key: `S.${index}:SUCCESSFUL`, lease: lease() }));
    for (const { key, lease: own } of held) await store.receive(key, {}, own);
    const before = batches();
    const settled = await Promise.all(
      held.map(({ key, lease: own }, index) =>
        store.settle(key, index === 7 ? 'not-the-lease' : own.id, { status: 'delivered' }),
      ),
    );
    expect(settled).toEqual(held.map((_, index) => index !== 7));
    expect(batches() - before).toBeGreaterThan(0);
    expect((await store.get('S.7:SUCCESSFUL'))?.status).toBe('received');
    expect((await store.get('S.8:SUCCESSFUL'))?.status).toBe('delivered');
  });

  test('receives and settlements that arrive together share a statement; each is told its own outcome', async () => {
    const { store, batches, statements } = await fresh();
    const held = Array.from({ length: 12 }, (_, index) => ({ key: `M.${index}:SUCCESSFUL`, lease: lease() }));
    for (const { key, lease: own } of held) await store.receive(key, {}, own);
    const fresh12 = Array.from({ length: 12 }, (_, index) => `N.${index}:SUCCESSFUL`);
    const before = batches();
    const [settled, received] = await Promise.all([
      Promise.all(
        held.map(({ key, lease: own }, index) =>
          store.settle(key, index === 3 ? 'not-the-lease' : own.id, { status: 'delivered' }),
        ),
      ),
      Promise.all([...fresh12, 'M.5:SUCCESSFUL'].map((key) => store.receive(key, {}, lease()))),
    ]);
    expect(settled).toEqual(held.map((_, index) => index !== 3));
    expect(received).toEqual([...fresh12.map(() => true), false]); // M.5 was there already
    expect(statements.some((text) => text.includes('WITH received AS'))).toBe(true);
    expect(batches() - before).toBeLessThan(held.length + fresh12.length + 1);
    expect((await store.get('M.3:SUCCESSFUL'))?.status).toBe('received');
    expect((await store.get('M.4:SUCCESSFUL'))?.status).toBe('delivered');
    expect((await store.get('N.11:SUCCESSFUL'))?.status).toBe('received');
  });

  describe('through the router', () => {
    const serve = servedRouters();

    test('a failed batch answers 503 to each of its requests; their resends are stored and delivered once', async () => {
      const { store, failNextBatch } = await fresh();
      const ipn = ipnRouter({ store, delivery: 'at-least-once', logger: quiet, recoveryIntervalMs: 50 });
      const delivered = new Map<string, number>();
      ipn.on(
        'successful',
        (n) => void delivered.set(n.transaction_id, (delivered.get(n.transaction_id) ?? 0) + 1),
      );
      const { post } = await serve(ipn);
      const payloads = Array.from({ length: 30 }, () => uniquePayload());
      failNextBatch();
      const statuses = await Promise.all(payloads.map(async (payload) => (await post(payload)).status));
      expect(statuses.every((status) => status === 200 || status === 503)).toBe(true);
      expect(statuses.filter((status) => status === 503).length).toBeGreaterThan(0);
      // The service resends what got 503.
      const resent = payloads.filter((_, index) => statuses[index] === 503);
      expect(await Promise.all(resent.map(async (payload) => (await post(payload)).status))).toEqual(
        resent.map(() => 200),
      );
      await until(() => delivered.size === payloads.length, 'every payment delivered', 10_000);
      expect([...delivered.values()].every((count) => count === 1)).toBe(true);
    });
  });
});
