import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import { Pool } from 'pg';
import { PostgresStore } from 'ipn-kit/postgres';
import { RedisStore } from 'ipn-kit/redis';
import { expectAnother, keptRouter, resendingService } from '../helpers/kept-unexpected.js';
import { until } from '../helpers/until.js';
import { databaseUrl, describeWithService, redisUrl } from '../helpers/services.js';
import { CLEANUP_TIMEOUT_MS, dropPostgresInboxes } from '../helpers/drop-inboxes.js';

jest.setTimeout(60_000);

type Store = PostgresStore | RedisStore;

/**
 * A kept unexpected copy the service's record confirms, found by two instances' sweeps and reconcile()
 * calls at once (one inbox): made due by whichever comes first, credited once, never twice.
 */
function races(service: 'PostgreSQL' | 'Redis', makeStore: () => Promise<() => Store>) {
  describeWithService(service, `kept unexpected copy, races (${service})`, () => {
    const service = resendingService();

    async function instance(store: () => Store) {
      return service.serve(
        keptRouter(
          store(),
          { baseUrl: service.provider.statusBaseUrl, blockCooldownMs: 20, minIntervalMs: 0 },
          { recoveryIntervalMs: 50 },
        ),
      );
    }

    for (const round of [1, 2]) {
      test(`two instances' sweeps and reconcile() at once credit it once (round ${round})`, async () => {
        const store = await makeStore();
        const a = await instance(store);
        const b = await instance(store);
        await expectAnother(a.ipn);
        const paid = service.provider.initiate({
          amount: 5000,
          ipnUrl: a.url,
          customData: '{"order": 7, "sku": "x"}',
          outcome: 'SUCCESSFUL',
        });
        service.provider.block();
        await paid.delivered;
        await until(() => a.events.count('rejected') > 0, 'the kept notification');
        service.provider.unblock();
        await new Promise((resolve) => setTimeout(resolve, 50));
        const key = `${paid.transactionId}:SUCCESSFUL`;
        expect(await a.ipn.inbox.get(key)).toMatchObject({ status: 'failed' });
        await a.ipn.expect(paid.transactionId, { amount: 5000, customData: '{"order": 7, "sku": "x"}' });
        await new Promise((resolve) => setTimeout(resolve, 20));
        const results = await Promise.allSettled([
          a.ipn.reconcile(paid.transactionId),
          b.ipn.reconcile(paid.transactionId),
          a.ipn.sweep(),
          b.ipn.sweep(),
          a.ipn.reconcile(paid.transactionId),
        ]);
        expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
        await until(() => a.events.count('successful') + b.events.count('successful') > 0, 'the credit');
        let entry = await a.ipn.inbox.get(key);
        for (let tries = 0; entry?.status !== 'delivered' && tries < 200; tries += 1) {
          await new Promise((resolve) => setTimeout(resolve, 10)); // the mark is committed after the event
          entry = await a.ipn.inbox.get(key);
        }
        expect(entry).toMatchObject({ status: 'delivered' });
        // Asked again: nothing more.
        await Promise.all([a.ipn.reconcile(paid.transactionId), b.ipn.reconcile(paid.transactionId)]);
        await Promise.all([a.ipn.drain({ budgetMs: 300 }), b.ipn.drain({ budgetMs: 300 })]);
        expect(a.events.count('successful') + b.events.count('successful')).toBe(1);
        expect(a.events.count('error') + b.events.count('error')).toBe(0);
      });
    }
  });
}

const admin = new Pool({ connectionString: databaseUrl() });
const tables: string[] = [];
afterAll(async () => {
  await dropPostgresInboxes(admin, tables).catch(() => undefined);
  await admin.end();
}, CLEANUP_TIMEOUT_MS);
races('PostgreSQL', async () => {
  const table = `kur_${process.pid}_${randomUUID().slice(0, 8)}`;
  tables.push(table);
  await new PostgresStore({ pool: admin, table }).migrate();
  return () => new PostgresStore({ pool: admin, table });
});

let client: Redis | undefined;
afterAll(() => client?.disconnect());
races('Redis', () => {
  client ??= new Redis(redisUrl());
  client.on('error', () => {});
  const prefix = `ipn-kit-test:kur:${process.pid}:${randomUUID().slice(0, 8)}:`;
  const c = client;
  return Promise.resolve(() => new RedisStore({ client: c, prefix }));
});
