import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import Redis from 'ioredis';
import { createPool, type Pool as MysqlPool } from 'mysql2/promise';
import { Pool } from 'pg';
import { createStatusClient, ipnRouter, MemoryStore, type IpnRouter, type Store } from 'ipn-kit';
import { MysqlStore } from 'ipn-kit/mysql';
import { PostgresStore } from 'ipn-kit/postgres';
import { RedisStore } from 'ipn-kit/redis';
import { SqliteStore } from 'ipn-kit/sqlite';
import { createFakeProvider, type FakeProvider } from 'ipn-kit/testing';
import { failedPayload, uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, settle, type Running } from '../helpers/servers.js';
import { databaseUrl, describeWithService, mysqlUrl, redisUrl } from '../helpers/services.js';
import { dropMysqlInboxes, dropPostgresInboxes } from '../helpers/drop-inboxes.js';

jest.setTimeout(30_000);

/** Runs `assertion` until it passes (every 10 ms, at most 10 s), then throws its last failure. */
async function eventually(assertion: () => unknown): Promise<void> {
  for (let tries = 0; ; tries += 1) {
    try {
      await assertion();
      return;
    } catch (error) {
      if (tries >= 1_000) throw error;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }
}

type Delivery = 'at-most-once' | 'at-least-once';

/** A store backend: `store()` is a new store object over the same data (another instance of the fleet). */
interface Backend {
  store: () => Store;
  setup?: () => Promise<void>;
  teardown?: () => Promise<void>;
}

/**
 * Issue 33: once expectations are in use on a store, a notification of a transaction with no expectation is
 * confirmed by one status query or kept and not credited, on every instance over the store.
 */
function suite(name: string, makeBackend: () => Backend): void {
  describe.each<Delivery>(['at-most-once', 'at-least-once'])(`${name}, %s`, (delivery) => {
    const backend = makeBackend();
    let provider: FakeProvider;
    const servers: Running[] = [];
    const routers: IpnRouter[] = [];
    let order = 0;

    beforeAll(async () => {
      await backend.setup?.();
      provider = await createFakeProvider({ apiKey: 'test-key', resendIntervalMs: 50, resends: 40 });
    });
    afterAll(async () => {
      await provider.close();
      await backend.teardown?.();
    });
    afterEach(async () => {
      await Promise.all(servers.splice(0).map((server) => server.close()));
      await Promise.all(routers.splice(0).map((ipn) => ipn.close()));
    });

    const statusClient = () => createStatusClient({ baseUrl: provider.statusBaseUrl, apiKey: 'test-key' });
    /** One instance of the fleet, served on loopback; `store` shared with the others. */
    async function instance(store: Store, options: Record<string, unknown> = {}) {
      const ipn = ipnRouter({
        store,
        delivery,
        logger: quiet,
        sweepIntervalMs: 2 ** 31 - 1,
        recoveryIntervalMs: 50,
        ...options,
      });
      routers.push(ipn);
      const running = await listen(ipn);
      servers.push(running);
      return { ipn, url: `${running.url}/`, recorder: recordEvents(ipn) };
    }
    /** Instance A initiates a payment and expects it: the store then holds the mark of their use. */
    async function fleet(options: Record<string, unknown> = {}) {
      const store = backend.store();
      const a = await instance(store, options);
      const b = await instance(backend.store(), options);
      const victim = `order-${process.pid}-${(order += 1)}`;
      await a.ipn.expect(`EXP.${randomUUID().slice(0, 8)}`, { amount: 5000, customData: victim });
      return { a, b, victim };
    }

    test('a forged fresh transaction_id with the victim order and amount, posted to another instance, is never credited', async () => {
      const { b, victim } = await fleet();
      const forgedId = `FRG.${randomUUID().slice(0, 8)}`;
      const status = await provider.forge({
        ipnUrl: b.url,
        transactionId: forgedId,
        customData: victim,
        amount: 5000,
      });
      await eventually(() => expect(b.recorder.names()).toContain('rejected'));
      expect(b.recorder.of('rejected')[0]).toMatchObject({
        reason: 'unexpected',
        notification: { transaction_id: forgedId, custom_data: victim },
      });
      if (delivery === 'at-least-once') {
        // Kept: 200 (the service stops resending), in the inbox, never due; a drain does not deliver it.
        expect(status).toBe(200);
        const entry = await b.ipn.inbox.get(`${forgedId}:SUCCESSFUL`);
        expect(entry).toMatchObject({ status: 'failed', transactionId: forgedId });
        expect(entry?.lastError).toMatch(/^unexpected: /);
        expect(b.recorder.of('rejected')[0]?.key).toBe(`${forgedId}:SUCCESSFUL`);
        // Listed where the operator's page and the CLI look: the failed entries.
        const failed = await b.ipn.inbox.list({ status: 'failed', transactionId: forgedId });
        expect(failed.map((e) => e.key)).toEqual([`${forgedId}:SUCCESSFUL`]);
        await b.ipn.drain({ budgetMs: 2_000 });
        expect(await b.ipn.inbox.replayDead()).toBe(0);
        await b.ipn.drain({ budgetMs: 2_000 });
      } else {
        expect(status).toBe(503);
      }
      await settle();
      expect(b.recorder.count('successful')).toBe(0);
    });

    test('with a status client, a genuine unexpected notification is confirmed by one status query and credited once', async () => {
      const { a, b } = await fleet({ statusClient: statusClient() });
      // Either instance's recovery may deliver a confirmed one, at least once (kept first, then made due).
      const credited = () => a.recorder.count('successful') + b.recorder.count('successful');
      const tx = provider.initiate({
        amount: 7000,
        ipnUrl: b.url,
        customData: 'order-lost-expectation',
        outcome: 'SUCCESSFUL',
        duplicates: 1,
      });
      expect(await tx.delivered).toMatchObject({ acknowledged: true });
      await eventually(() => expect(credited()).toBe(1));
      await settle();
      expect(credited()).toBe(1);
      expect(b.recorder.names()).not.toContain('rejected');
      // One query for the first copy; the resend is answered from the client's cache of a final record.
      expect(provider.statusQueriesFor(tx.transactionId)).toBe(1);

      // A forged fresh id: the service does not know it, never credited.
      const forgedId = `FRG.${randomUUID().slice(0, 8)}`;
      const answered = await provider.forge({
        ipnUrl: b.url,
        transactionId: forgedId,
        customData: 'order-x',
        amount: 7000,
      });
      // At most once nothing keeps it: 503, so that a genuine one is resent (a forgery's resends are refused).
      expect(answered).toBe(delivery === 'at-least-once' ? 200 : 503);
      await eventually(() => expect(b.recorder.count('rejected')).toBe(1));
      expect(b.recorder.of('rejected')[0]).toMatchObject({ reason: 'unexpected' });
      expect(provider.statusQueriesFor(forgedId)).toBe(1);
      if (delivery === 'at-least-once') {
        // Marked kept by the query's answer, saying why.
        const kept = await b.ipn.inbox.get(`${forgedId}:SUCCESSFUL`);
        expect(kept?.status).toBe('failed');
        expect(kept?.lastError).toMatch(/^unexpected: .*the payment service does not know it; kept/);
      }
      expect(credited()).toBe(1);
    });

    test("unexpected: 'reject' makes no status query: the genuine one is kept, then delivered once an operator replays or expects it", async () => {
      const { a, b } = await fleet({ statusClient: statusClient(), unexpected: 'reject' });
      const tx = provider.initiate({
        amount: 6000,
        ipnUrl: b.url,
        customData: 'order-kept',
        outcome: 'SUCCESSFUL',
      });
      await eventually(() => expect(b.recorder.count('rejected')).toBeGreaterThanOrEqual(1));
      expect(b.recorder.of('rejected')[0]).toMatchObject({ reason: 'unexpected' });
      expect(b.recorder.count('successful')).toBe(0);
      expect(provider.statusQueriesFor(tx.transactionId)).toBe(0);
      if (delivery === 'at-least-once') {
        expect(await tx.delivered).toMatchObject({ acknowledged: true });
        // Replayed from the other instance, after checking: credited once.
        expect(await a.ipn.inbox.replay(`${tx.transactionId}:SUCCESSFUL`)).toBe(true);
        await eventually(() =>
          expect(a.recorder.count('successful') + b.recorder.count('successful')).toBe(1),
        );
      } else {
        // Answered 503, so the service resends; once expected, the next resend is credited.
        await a.ipn.expect(tx.transactionId, { amount: 6000, customData: 'order-kept' });
        expect(await tx.delivered).toMatchObject({ acknowledged: true });
        await eventually(() => expect(b.recorder.count('successful')).toBe(1));
      }
      await settle();
      expect(a.recorder.count('successful') + b.recorder.count('successful')).toBe(1);
      expect(provider.statusQueriesFor(tx.transactionId)).toBe(0);
    });

    test("unexpected: 'accept' credits a notification with no expectation, as before", async () => {
      const { b } = await fleet({ unexpected: 'accept' });
      const forgedId = `FRG.${randomUUID().slice(0, 8)}`;
      expect(await provider.forge({ ipnUrl: b.url, transactionId: forgedId, amount: 5000 })).toBe(200);
      await eventually(() => expect(b.recorder.count('successful')).toBe(1));
      expect(b.recorder.names()).not.toContain('rejected');
    });

    /** A status client whose queries wait until `open()`: what the service answers, when the test says. */
    function gatedStatusClient() {
      const client = statusClient();
      let open!: () => void;
      const gate = new Promise<void>((resolve) => (open = resolve));
      let calls = 0;
      return {
        open,
        calls: () => calls,
        statusClient: {
          getStatus: async (id: string) => {
            calls += 1;
            await gate;
            return client.getStatus(id);
          },
        },
      };
    }

    if (delivery === 'at-least-once') {
      test('the service gets its 200 before the status query answers; confirmed after it, the kept notification is credited once', async () => {
        const gated = gatedStatusClient();
        const { a, b } = await fleet({ statusClient: gated.statusClient });
        const tx = provider.initiate({
          amount: 7100,
          ipnUrl: b.url,
          customData: 'order-answered-first',
          outcome: 'SUCCESSFUL',
        });
        // Acknowledged while the query is still waiting: kept first, and not credited yet.
        expect(await tx.delivered).toMatchObject({ acknowledged: true });
        const key = `${tx.transactionId}:SUCCESSFUL`;
        await eventually(() => expect(gated.calls()).toBe(1));
        // Kept under its hold lease while its query runs (the answer ends that lease, as a replay would).
        const waiting = await b.ipn.inbox.get(key);
        expect(waiting?.status).toBe('received');
        expect(waiting?.leaseUntil?.getTime()).toBeGreaterThan(Date.now() + 365 * 24 * 60 * 60_000);
        expect(a.recorder.count('successful') + b.recorder.count('successful')).toBe(0);
        gated.open();
        await eventually(() =>
          expect(a.recorder.count('successful') + b.recorder.count('successful')).toBe(1),
        );
        await eventually(async () => expect((await b.ipn.inbox.get(key))?.status).toBe('delivered'));
        await settle();
        expect(a.recorder.count('successful') + b.recorder.count('successful')).toBe(1);
        expect(b.recorder.names()).not.toContain('rejected');
        expect(provider.statusQueriesFor(tx.transactionId)).toBe(1);
      });

      test("an operator's replay racing the status query is credited once: the confirmation does not make it due again", async () => {
        const gated = gatedStatusClient();
        const { a, b } = await fleet({ statusClient: gated.statusClient });
        const tx = provider.initiate({
          amount: 7200,
          ipnUrl: b.url,
          customData: 'order-race',
          outcome: 'SUCCESSFUL',
        });
        expect(await tx.delivered).toMatchObject({ acknowledged: true });
        const key = `${tx.transactionId}:SUCCESSFUL`;
        await eventually(() => expect(gated.calls()).toBe(1));
        expect(await b.ipn.inbox.replay(key)).toBe(true);
        await eventually(async () => expect((await b.ipn.inbox.get(key))?.status).toBe('delivered'));
        gated.open();
        await eventually(() => expect(provider.statusQueriesFor(tx.transactionId)).toBe(1));
        await settle();
        await b.ipn.drain({ budgetMs: 2_000 });
        await settle();
        expect(a.recorder.count('successful') + b.recorder.count('successful')).toBe(1);
      });

      // SQLite has one writer: a replay waits for the running delivery's transaction, which the test holds.
      const writersWait = name === 'SqliteStore';
      (writersWait ? test.skip : test)(
        "the confirmation and an operator's replay at once: the replay lands while the confirmed delivery runs, credited once",
        async () => {
          // The confirmation's instance reads the entry through a store that holds a read of it (after
          // making it) until the test says: a confirmation that reads "kept" and then makes it due acts on
          // a read the replay and its delivery made stale.
          const gated = gatedStatusClient();
          let holdReads = false;
          let readHeld!: () => void;
          const heldRead = new Promise<void>((resolve) => (readHeld = resolve));
          let letRead!: () => void;
          const readGate = new Promise<void>((resolve) => (letRead = resolve));
          type Method = (...args: unknown[]) => unknown;
          const inner = backend.store();
          const holding = new Proxy(inner, {
            get(target, property) {
              const value: unknown = Reflect.get(target, property, target);
              if (property === 'get' && typeof value === 'function')
                return async (key: string) => {
                  const entry: unknown = await (value as Method).call(target, key);
                  if (holdReads) {
                    readHeld();
                    await readGate;
                  }
                  return entry;
                };
              return typeof value === 'function' ? (value as Method).bind(target) : value;
            },
          });
          const a = await instance(backend.store(), { statusClient: gated.statusClient });
          const b = await instance(holding, { statusClient: gated.statusClient });
          await a.ipn.expect(`EXP.${randomUUID().slice(0, 8)}`, { amount: 5000, customData: 'x' });
          // The first delivery's listener waits until the test lets it finish: its delivery is running.
          let entered = 0;
          let letListener!: () => void;
          const listenerGate = new Promise<void>((resolve) => (letListener = resolve));
          for (const ipn of [a.ipn, b.ipn])
            ipn.on('successful', async () => {
              entered += 1;
              if (entered === 1) await listenerGate;
            });
          const payload = uniquePayload({ amount: 7250, custom_data: 'order-at-once' });
          const id = payload.transaction_id as string;
          const key = `${id}:SUCCESSFUL`;
          provider.initiate({
            transactionId: id,
            amount: 7250,
            ipnUrl: 'http://127.0.0.1:9/unused',
            customData: 'order-at-once',
            outcome: 'SUCCESSFUL',
            deliver: false,
          });
          provider.setState(id, 'SUCCESSFUL');
          expect((await post(b.url, payload)).status).toBe(200);
          await eventually(() => expect(gated.calls()).toBe(1));
          holdReads = true;
          gated.open();
          // The confirmation is between its read and its write, or its delivery is running.
          await Promise.race([heldRead, eventually(() => expect(entered).toBe(1))]);
          expect(await a.ipn.inbox.replay(key)).toBe(true);
          await eventually(() => expect(entered).toBe(1));
          letListener();
          await eventually(async () => expect((await a.ipn.inbox.get(key))?.status).toBe('delivered'));
          holdReads = false;
          letRead();
          await settle();
          await a.ipn.drain({ budgetMs: 2_000 });
          await b.ipn.drain({ budgetMs: 2_000 });
          await settle();
          expect(a.recorder.count('successful') + b.recorder.count('successful')).toBe(1);
          expect((await a.ipn.inbox.get(key))?.status).toBe('delivered');
        },
      );

      test('a crash between the two writes that keep it (settle fails after receive): never credited, and a replay of its key delivers it once', async () => {
        const inner = backend.store();
        let failed = 0;
        // The store fails the write that marks it kept: it stays received, under its hold lease.
        type Settle = (key: string, leaseId: string, settlement: unknown) => Promise<boolean>;
        type Method = (...args: unknown[]) => unknown;
        const faulty = new Proxy(inner, {
          get(target, property) {
            if (property === 'settle')
              return (key: string, leaseId: string, settlement: { status: string; error?: string }) => {
                if (
                  failed === 0 &&
                  settlement.status === 'failed' &&
                  settlement.error?.startsWith('unexpected: ')
                ) {
                  failed += 1;
                  return Promise.reject(new Error('connection lost'));
                }
                return (target as unknown as { settle: Settle }).settle(key, leaseId, settlement);
              };
            const value: unknown = Reflect.get(target, property, target);
            return typeof value === 'function' ? (value as Method).bind(target) : value;
          },
        });
        const a = await instance(inner);
        const b = await instance(faulty, { unexpected: 'reject' });
        await a.ipn.expect(`EXP.${randomUUID().slice(0, 8)}`, { amount: 5000, customData: 'x' });
        const payload = uniquePayload({ amount: 7300, custom_data: 'order-crash' });
        const key = `${payload.transaction_id as string}:SUCCESSFUL`;
        expect((await post(b.url, payload)).status).toBe(200);
        await eventually(() => expect(b.recorder.names()).toContain('error'));
        expect(failed).toBe(1);
        const entry = await a.ipn.inbox.get(key);
        expect(entry?.status).toBe('received');
        // Neither recovery nor a drain takes it: it is under its century-long hold lease.
        await a.ipn.drain({ budgetMs: 2_000 });
        await b.ipn.drain({ budgetMs: 2_000 });
        await settle();
        expect(a.recorder.count('successful') + b.recorder.count('successful')).toBe(0);
        // An operator's replay, from either instance, delivers it: once.
        expect(await a.ipn.inbox.replay(key)).toBe(true);
        await eventually(() =>
          expect(a.recorder.count('successful') + b.recorder.count('successful')).toBe(1),
        );
        await settle();
        expect(a.recorder.count('successful') + b.recorder.count('successful')).toBe(1);
      });
    } else {
      test('at most once, a refused unexpected SUCCESSFUL never touches the lifecycle: the genuine FAILED, once expected, is failed, not a conflict', async () => {
        const { b } = await fleet(); // no status client: refused, answered 503
        const id = `FRG.${randomUUID().slice(0, 8)}`;
        const fields = { transaction_id: id, amount: 5000, custom_data: 'order-refused' };
        expect((await post(b.url, uniquePayload(fields))).status).toBe(503);
        await eventually(() => expect(b.recorder.count('rejected')).toBe(1));
        await b.ipn.expect(id, { amount: 5000, customData: 'order-refused' });
        expect((await post(b.url, failedPayload(fields))).status).toBe(200);
        await eventually(() => expect(b.recorder.count('failed')).toBe(1));
        expect(b.recorder.count('conflict')).toBe(0);
        expect(b.recorder.count('successful')).toBe(0);
      });

      test('at most once, a genuine unexpected one refused (503) is never lost: once the service stopped resending, reconcile credits it once', async () => {
        const { b } = await fleet({ statusClient: statusClient(), unexpected: 'reject' });
        const tx = provider.initiate({
          amount: 6100,
          ipnUrl: 'http://127.0.0.1:9/unused',
          customData: 'order-reconciled',
          outcome: 'SUCCESSFUL',
          deliver: false,
        });
        provider.setState(tx.transactionId, 'SUCCESSFUL');
        const fields = { transaction_id: tx.transactionId, amount: 6100, custom_data: 'order-reconciled' };
        expect((await post(b.url, uniquePayload(fields))).status).toBe(503);
        await eventually(() => expect(b.recorder.count('rejected')).toBe(1));
        expect(b.recorder.count('successful')).toBe(0);
        expect(await b.ipn.reconcile(tx.transactionId)).toMatchObject({ emitted: true });
        await eventually(() => expect(b.recorder.count('successful')).toBe(1));
        expect(await b.ipn.reconcile(tx.transactionId)).toMatchObject({ emitted: false });
        expect(b.recorder.count('successful')).toBe(1);
      });

      test('at most once, a slow status query is answered 503 after storeTimeoutMs; the resend is confirmed from the cached answer and credited once', async () => {
        const gated = gatedStatusClient();
        const { b } = await fleet({ statusClient: gated.statusClient, storeTimeoutMs: 300 });
        const tx = provider.initiate({
          amount: 7400,
          ipnUrl: b.url,
          customData: 'order-slow',
          outcome: 'SUCCESSFUL',
        });
        await eventually(() => expect(b.recorder.count('rejected')).toBeGreaterThanOrEqual(1));
        expect(b.recorder.of('rejected')[0]).toMatchObject({ reason: 'unexpected' });
        expect(b.recorder.count('successful')).toBe(0);
        gated.open();
        expect(await tx.delivered).toMatchObject({ acknowledged: true });
        await eventually(() => expect(b.recorder.count('successful')).toBe(1));
        await settle();
        expect(b.recorder.count('successful')).toBe(1);
        // Every copy's query shared one request, and the resend was answered from the cache.
        expect(provider.statusQueriesFor(tx.transactionId)).toBe(1);
      });
    }

    const post = (url: string, payload: Record<string, unknown>) =>
      fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(payload),
      });

    test('a resend after its expectation was settled, then after it was forgotten, is a duplicate: never credited twice, never rejected', async () => {
      const { a, b } = await fleet();
      const store = backend.store();
      const payload = uniquePayload({ amount: 8000, custom_data: 'order-settled' });
      const id = payload.transaction_id as string;
      await a.ipn.expect(id, { amount: 8000, customData: 'order-settled' });
      expect((await post(a.url, payload)).status).toBe(200);
      await eventually(() => expect(a.recorder.count('successful')).toBe(1));
      // Settled, the expectation is kept for ttlMs: a resend to the other instance is expected, a duplicate.
      await eventually(async () =>
        expect((await store.expectations?.get(id))?.attempts).toBeGreaterThanOrEqual(1e9),
      );
      expect(await (await post(b.url, payload)).json()).toEqual({ ok: true, duplicate: true });
      // Forgotten altogether (deleted): still a duplicate, by the dedupe, and never a rejection.
      await store.expectations?.delete(id);
      const late = await post(b.url, payload);
      expect(late.status).toBe(200);
      expect(await late.json()).toEqual({ ok: true, duplicate: true });
      await settle();
      expect(a.recorder.count('successful') + b.recorder.count('successful')).toBe(1);
      expect([...a.recorder.names(), ...b.recorder.names()]).not.toContain('rejected');
    });

    test('a first delivery after the sweep gave up on its expectation is still expected: credited once, not rejected', async () => {
      const { a, b } = await fleet({ reconcileAfterMs: 1 });
      const payload = uniquePayload({ amount: 9000, custom_data: 'order-late' });
      const id = payload.transaction_id as string;
      await a.ipn.expect(id, { amount: 9000, customData: 'order-late' });
      await eventually(async () => {
        await a.ipn.sweep();
        expect(a.recorder.of('stale').map((e) => e.transactionId)).toContain(id);
      });
      const late = await post(b.url, payload);
      expect(late.status).toBe(200);
      await eventually(() => expect(b.recorder.count('successful')).toBe(1));
      expect(b.recorder.names()).not.toContain('rejected');
      // A forged copy of it with another amount is still checked against it.
      expect((await post(b.url, { ...payload, amount: 1 })).status).toBe(200);
      await eventually(() => expect(b.recorder.of('rejected').map((e) => e.reason)).toEqual(['mismatch']));
      expect(b.recorder.count('successful')).toBe(1);
    });
  });
}

suite('MemoryStore', () => {
  let store: MemoryStore;
  return {
    setup: () => {
      store = new MemoryStore();
      return Promise.resolve();
    },
    // One process: every instance over one MemoryStore object.
    store: () => store,
  };
});

describeWithService('Redis', 'unexpected notifications over RedisStore', () => {
  const prefix = `ipn-kit-test:unexpected:${process.pid}:${randomUUID().slice(0, 8)}:`;
  const clients: Redis[] = [];
  suite('RedisStore', () => ({
    store: () => {
      const client = new Redis(redisUrl());
      client.on('error', () => {});
      clients.push(client);
      return new RedisStore({ client, prefix });
    },
    teardown: async () => {
      const [client] = clients;
      if (client) {
        const keys = await client.keys(`${prefix}*`);
        if (keys.length > 0) await client.del(...keys);
      }
      await Promise.all(clients.splice(0).map((c) => c.quit()));
    },
  }));
});

describeWithService('PostgreSQL', 'unexpected notifications over PostgresStore', () => {
  let pool: Pool;
  const tables: string[] = [];
  suite('PostgresStore', () => {
    const table = `ipn_test_unexp_${process.pid}_${randomUUID().slice(0, 8)}`;
    tables.push(table);
    return {
      setup: async () => {
        pool ??= new Pool({ connectionString: databaseUrl(), max: 6 });
        pool.on('error', () => {});
        await new PostgresStore({ pool, table }).migrate();
      },
      store: () => new PostgresStore({ pool, table }),
      teardown: async () => {
        await dropPostgresInboxes(pool, [table]);
      },
    };
  });
  afterAll(async () => pool?.end());
});

describeWithService('MariaDB', 'unexpected notifications over MysqlStore', () => {
  let pool: MysqlPool;
  suite('MysqlStore', () => {
    const table = `ipn_test_unexp_${process.pid}_${randomUUID().slice(0, 8)}`;
    return {
      setup: async () => {
        pool ??= createPool({ uri: mysqlUrl(), connectionLimit: 6 });
        await new MysqlStore({ pool, table }).migrate();
      },
      store: () => new MysqlStore({ pool, table }),
      teardown: async () => {
        await dropMysqlInboxes(pool, [table]);
      },
    };
  });
  afterAll(async () => pool?.end());
});

describe('unexpected notifications over SqliteStore', () => {
  const folder = mkdtempSync(join(tmpdir(), 'ipn-unexpected-'));
  const opened: Database.Database[] = [];
  afterAll(() => {
    for (const database of opened) if (database.open) database.close();
    rmSync(folder, { recursive: true, force: true });
  });
  suite('SqliteStore', () => {
    const path = join(folder, `${randomUUID().slice(0, 8)}.db`);
    const open = () => {
      const database = new Database(path);
      database.pragma('busy_timeout = 5000');
      opened.push(database);
      return database;
    };
    return {
      setup: async () => new SqliteStore({ database: open() }).migrate(),
      // Each instance its own connection to the one file.
      store: () => new SqliteStore({ database: open() }),
    };
  });
});
