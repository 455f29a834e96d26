import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import { createPool, type Pool as MysqlPool } from 'mysql2/promise';
import { MemoryStore, type DurableStore } from 'ipn-kit';
import { MysqlStore } from 'ipn-kit/mysql';
import { RedisStore } from 'ipn-kit/redis';
import { SqliteStore } from 'ipn-kit/sqlite';
import { expectAnother, keptRouter, resendingService } from '../helpers/kept-unexpected.js';
import { until } from '../helpers/until.js';
import { describeWithService, eventually, mysqlUrl, redisUrl, type Service } from '../helpers/services.js';
import { CLEANUP_TIMEOUT_MS, dropMysqlInboxes } from '../helpers/drop-inboxes.js';
import { suiteSqliteFile } from '../helpers/sqlite-file.js';

jest.setTimeout(60_000);

/**
 * At least once, with a status client: a forged copy posted for the NEXT transaction id (ids are a prefix
 * and a sequence) before that payment exists is kept (the service: not found). The genuine notification,
 * once the payment exists and is expected, is answered as its duplicate. The sweep and `ipn.reconcile()`
 * then find the key held by a kept copy that the service's record contradicts: the record takes its place
 * (`replayWith`, one write) and is credited once, never the forgery, whichever instances ask at once.
 * PostgreSQL: kept-unexpected-sweep.test.ts and kept-unexpected-midway.test.ts.
 */
function forged(service: Service | 'Memory' | 'SQLite', makeStore: () => Promise<() => DurableStore>) {
  const describeOn = (name: string, fn: () => void) =>
    service === 'Memory' || service === 'SQLite'
      ? describe(name, fn)
      : describeWithService(service, name, fn);
  describeOn(`a forged copy kept before its transaction exists (${service})`, () => {
    const provider = resendingService();

    async function instance(store: () => DurableStore) {
      const settings = { baseUrl: provider.provider.statusBaseUrl, blockCooldownMs: 20, minIntervalMs: 0 };
      return provider.serve(keptRouter(store(), settings, { recoveryIntervalMs: 50 }));
    }

    test("two instances asking at once: the service's record takes the forgery's place, credited once", async () => {
      const store = await makeStore();
      const a = await instance(store);
      const b = await instance(store);
      await expectAnother(a.ipn);
      const id = `EFF.${randomUUID().slice(0, 8)}`; // the next id the service will give
      const forgery = { ipnUrl: a.url, transactionId: id, customData: 'order-5', amount: 1 };
      expect(await provider.provider.forge(forgery)).toBe(200);
      await until(() => a.events.count('rejected') > 0, 'the kept forgery'); // the service: not found
      const key = `${id}:SUCCESSFUL`;
      expect(await a.ipn.inbox.get(key)).toMatchObject({ status: 'failed' });
      provider.provider.initiate({
        transactionId: id,
        amount: 5000,
        ipnUrl: a.url,
        customData: 'order-5',
        outcome: 'SUCCESSFUL',
        deliver: false,
      });
      await a.ipn.expect(id, { amount: 5000, customData: 'order-5' });
      await new Promise((resolve) => setTimeout(resolve, 20)); // due (reconcileAfterMs)
      // The service's notification (expected: it takes the kept forgery's place too) arrives meanwhile.
      const genuine = { transaction_id: id, state: 'SUCCESSFUL', amount: 5000, custom_data: 'order-5' };
      const results = await Promise.allSettled([
        b.post(genuine).then((answer) => expect(answer.status).toBe(200)),
        a.ipn.reconcile(id),
        b.ipn.reconcile(id),
        a.ipn.sweep(),
        b.ipn.sweep(),
      ]);
      expect(results.filter((result) => result.status === 'rejected')).toEqual([]);
      await eventually('the record is delivered', async () => {
        await Promise.all([a.ipn.drain({ budgetMs: 100 }), b.ipn.drain({ budgetMs: 100 })]);
        return (await a.ipn.inbox.get(key))?.status === 'delivered';
      });
      // Asked again: nothing more.
      await Promise.all([a.ipn.reconcile(id), b.ipn.reconcile(id), a.ipn.sweep(), b.ipn.sweep()]);
      await Promise.all([a.ipn.drain({ budgetMs: 300 }), b.ipn.drain({ budgetMs: 300 })]);
      const credited = [...a.events.of('successful'), ...b.events.of('successful')];
      expect(credited).toEqual([expect.objectContaining({ amount: 5000, custom_data: 'order-5' })]);
      expect(await a.ipn.inbox.get(key)).toMatchObject({
        status: 'delivered',
        record: expect.objectContaining({ amount: 5000, custom_data: 'order-5' }),
      });
      expect(a.events.count('error') + b.events.count('error')).toBe(0);
    });
  });
}

forged('Memory', () => {
  const store = new MemoryStore();
  return Promise.resolve(() => store);
});

const database = suiteSqliteFile('ipn-kit-kuf-');
forged('SQLite', async () => {
  const table = `kuf_${randomUUID().slice(0, 8)}`;
  await new SqliteStore({ database, table }).migrate();
  return () => new SqliteStore({ database, table });
});

let pool: MysqlPool | undefined;
const mysqlTables: string[] = [];
afterAll(async () => {
  if (pool === undefined) return;
  await dropMysqlInboxes(pool, mysqlTables).catch(() => undefined);
  await pool.end();
}, CLEANUP_TIMEOUT_MS);
forged('MariaDB', async () => {
  pool ??= createPool({ uri: mysqlUrl(), connectionLimit: 4 });
  const table = `kuf_${process.pid}_${randomUUID().slice(0, 8)}`;
  mysqlTables.push(table);
  const made = pool;
  await new MysqlStore({ pool: made, table }).migrate();
  return () => new MysqlStore({ pool: made, table });
});

let client: Redis | undefined;
afterAll(() => client?.disconnect());
forged('Redis', () => {
  client ??= new Redis(redisUrl());
  client.on('error', () => {});
  const prefix = `ipn-kit-test:kuf:${process.pid}:${randomUUID().slice(0, 8)}:`;
  const c = client;
  return Promise.resolve(() => new RedisStore({ client: c, prefix }));
});

describe('a store without replayWith()', () => {
  const provider = resendingService();

  test('the forgery stays kept, nothing is credited, and the router says once why', async () => {
    const store = new MemoryStore();
    Object.defineProperty(store, 'replayWith', { value: undefined });
    const settings = { baseUrl: provider.provider.statusBaseUrl, blockCooldownMs: 20, minIntervalMs: 0 };
    const { ipn, events, url } = await provider.serve(
      keptRouter(store, settings, { recoveryIntervalMs: 50 }),
    );
    await expectAnother(ipn);
    const id = `EFN.${randomUUID().slice(0, 8)}`;
    expect(
      await provider.provider.forge({ ipnUrl: url, transactionId: id, customData: 'order-6', amount: 1 }),
    ).toBe(200);
    await until(() => events.count('rejected') > 0, 'the kept forgery');
    provider.provider.initiate({
      transactionId: id,
      amount: 5000,
      ipnUrl: url,
      customData: 'order-6',
      outcome: 'SUCCESSFUL',
      deliver: false,
    });
    await ipn.expect(id, { amount: 5000, customData: 'order-6' });
    await new Promise((resolve) => setTimeout(resolve, 20)); // due (reconcileAfterMs)
    await ipn.sweep();
    await ipn.drain({ budgetMs: 300 });
    await ipn.sweep();
    expect(events.count('successful')).toBe(0);
    expect(await ipn.inbox.get(`${id}:SUCCESSFUL`)).toMatchObject({
      status: 'failed',
      record: expect.objectContaining({ amount: 1 }),
    });
    expect(events.of('error')).toEqual([
      expect.objectContaining({
        error: expect.objectContaining({ message: expect.stringMatching(/has no replayWith\(\)/) }),
      }),
    ]);
  });
});
