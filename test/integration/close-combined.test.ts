import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { createPool } from 'mysql2/promise';
import { MysqlStore } from 'ipn-kit/mysql';
import { SqliteStore } from 'ipn-kit/sqlite';
import { IpnKitError, MemoryStore, type Store } from 'ipn-kit';
import { CLEANUP_TIMEOUT_MS, dropMysqlInboxes } from '../helpers/drop-inboxes.js';
import {
  closeServed,
  closeWhileOpening,
  firstClaimHeld,
  pooled,
  postgresConnections,
  redisConnections,
  type Connected,
} from '../helpers/ended-pool.js';
import { describeWithService, mysqlUrl } from '../helpers/services.js';
import { settle } from '../helpers/servers.js';
import { until } from '../helpers/until.js';
import { latch, paid, perTestService, quietRouter, statusClientOf } from '../helpers/verified-payments.js';

// ipn.close() against the other work of the router that it did not wait for: an ipn.reconcile() under way as
// close() runs, and the rest of a sweep's batch that close() stopped. The host ends its pool once close()
// resolved (here: the store's close()), and the next process takes over the same data.

jest.setTimeout(60_000);

const t = perTestService({ unhandled: true });

/**
 * `t.provider`'s status client, whose first query (of `id`, or of any transaction) waits until `open()`;
 * `querying` once it does.
 */
function firstQueryHeld(id?: string) {
  const client = statusClientOf(t.provider);
  const { gate, open } = latch();
  const held = {
    querying: false,
    open,
    statusClient: {
      getStatus: async (...args: Parameters<typeof client.getStatus>) => {
        if ((id === undefined || args[0] === id) && !held.querying) {
          held.querying = true;
          await gate;
        }
        return client.getStatus(...args);
      },
    },
  };
  return held;
}

test('at-most-once: an ipn.reconcile() claiming as close() runs is waited for: the payment is credited once', async () => {
  const id = await paid(t.provider);
  const data = new MemoryStore();
  // reconcile's claim is written, and answers once the test opens the gate (a query in flight).
  const held = firstClaimHeld(data, id);
  const { store, open } = held;
  const settings = { statusClient: statusClientOf(t.provider) };
  const { ipn, recorder } = await t.serve(quietRouter({ store, ...settings }));
  const reconciled = ipn.reconcile(id).then(
    (result) => result.emitted,
    (error: unknown) => error,
  );
  await until(() => held.claiming, 'the reconcile claiming');
  await closeWhileOpening(t, ipn, open); // the claim answers while close() runs
  await reconciled;
  await settle();
  const credited = recorder.count('successful');
  // The next process over the same data: the service's notification, sent late; credited once in all.
  const next = await t.serve(quietRouter({ store: pooled(data), ...settings }));
  expect(await t.provider.forge({ ipnUrl: next.url, transactionId: id })).toBe(200);
  await until(() => next.recorder.count('successful') + next.recorder.count('duplicate') > 0, 'the resend');
  await settle();
  expect(credited + next.recorder.count('successful')).toBe(1);
  expect(t.unhandled).toEqual([]);
});

/** `data`, whose every call (its own, its expectations' and its lifecycle's) is named in `calls` first. */
function callsOf(data: MemoryStore, calls: string[]): Store {
  const watch = <T extends object>(target: T, prefix: string): T =>
    new Proxy(target, {
      get(on, name) {
        const value: unknown = Reflect.get(on, name);
        if (typeof value !== 'function') return value;
        const method = value as (...args: unknown[]) => unknown;
        return (...args: unknown[]) => {
          calls.push(`${prefix}${String(name)}`);
          return method.apply(on, args);
        };
      },
    });
  const expectations = watch(data.expectations, 'expectations.');
  const lifecycle = watch(data.lifecycle, 'lifecycle.');
  return new Proxy(watch(data, ''), {
    get(on, name) {
      if (name === 'expectations') return expectations;
      if (name === 'lifecycle') return lifecycle;
      return Reflect.get(on, name);
    },
  });
}

// Once close() was called, a POST is answered 503 and nothing is claimed. An ipn.reconcile() called then
// asked the service, claimed the key and ran the listeners with nobody left to wait for them, into the store
// the host ends once close() resolved: the key held for ttlMs with nothing credited, or a credit cut short.
test('ipn.reconcile() once close() was called (running, then resolved) rejects IPN_CLOSED: nothing asked, claimed nor written', async () => {
  const id = await paid(t.provider);
  const data = new MemoryStore();
  const calls: string[] = [];
  const client = statusClientOf(t.provider);
  let asked = 0;
  const statusClient = {
    getStatus: (...args: Parameters<typeof client.getStatus>) => {
      asked += 1;
      return client.getStatus(...args);
    },
  };
  const { ipn, recorder } = await t.serve(quietRouter({ store: callsOf(data, calls), statusClient }));
  await ipn.expect(id, { amount: 100 });
  await t.running?.close();
  t.running = undefined;
  calls.length = 0;
  const closing = ipn.close();
  const whileClosing = ipn.reconcile(id);
  await closing;
  t.ipn = undefined;
  const afterClose = ipn.reconcile(id);
  for (const refused of [whileClosing, afterClose]) {
    await expect(refused).rejects.toBeInstanceOf(IpnKitError);
    await expect(refused).rejects.toMatchObject({ code: 'IPN_CLOSED' });
  }
  await settle();
  expect(asked).toBe(0);
  expect(calls.filter((call) => call !== 'close')).toEqual([]);
  expect(recorder.count('successful')).toBe(0);
  // The next process over the same data: the key was never claimed, the expectation never settled.
  const next = await t.serve(quietRouter({ store: data, statusClient: client }));
  expect((await next.ipn.reconcile(id)).emitted).toBe(true);
  await settle();
  expect(next.recorder.count('successful')).toBe(1);
  expect(t.unhandled).toEqual([]);
});

test("a sweep stopped by close() puts back the rest of its batch: the next process's sweep credits them at once", async () => {
  const first = await paid(t.provider);
  const second = await paid(t.provider);
  const data = new MemoryStore();
  // The first expectation's query is in flight as close() runs.
  const held = firstQueryHeld(first);
  const { statusClient, open } = held;
  const settings = { statusClient, reconcileAfterMs: 1 };
  const { ipn } = await t.serve(quietRouter({ store: pooled(data), ...settings }));
  await ipn.expect(first, { amount: 100 });
  await ipn.expect(second, { amount: 100 });
  await new Promise((resolve) => setTimeout(resolve, 5)); // both due
  const swept = ipn.sweep();
  await until(() => held.querying, 'the sweep querying');
  await closeWhileOpening(t, ipn, open);
  await swept;
  await settle();
  // Not asked about by the pass that close() stopped: due now, no status query counted against it.
  expect(data.expectations.get(second)?.attempts).toBe(0);
  // The next process over the same data (another instance, a restart): its sweep finds the second due.
  const next = await t.serve(quietRouter({ store: pooled(data), ...settings }));
  const result = await next.ipn.sweep();
  expect(result.reconciled).toBe(1);
  expect(next.recorder.count('successful')).toBe(1);
  expect(t.unhandled).toEqual([]);
});

/** The sweep stopped by close() over a real store (`connect`: the same data each time, a new connection). */
function sweepStoppedOver(connectTo: (space: string) => Promise<Connected>) {
  test("a sweep stopped by close() puts back the rest of its batch: the next process's sweep credits it", async () => {
    const space = randomUUID().slice(0, 6);
    const first = await paid(t.provider);
    const second = await paid(t.provider);
    const held = firstQueryHeld(first);
    const { statusClient, open } = held;
    const settings = { statusClient, reconcileAfterMs: 1 };
    const connected = await connectTo(space);
    const { ipn } = await t.serve(quietRouter({ store: connected.store, ...settings }));
    await ipn.expect(first, { amount: 100 });
    await ipn.expect(second, { amount: 100 });
    await new Promise((resolve) => setTimeout(resolve, 5));
    const swept = ipn.sweep();
    await until(() => held.querying, 'the sweep querying');
    await closeWhileOpening(t, ipn, open);
    await swept;
    await connected.end();
    await settle();
    const again = await connectTo(space);
    try {
      const next = await t.serve(quietRouter({ store: again.store, ...settings }));
      const result = await next.ipn.sweep();
      expect(result.reconciled).toBe(1);
      expect(next.recorder.of('successful')).toMatchObject([{ transaction_id: second }]);
      await closeServed(t);
    } finally {
      await again.end();
    }
    expect(t.unhandled).toEqual([]);
  });
}

describeWithService('PostgreSQL', 'PostgresStore over a pg Pool ended once close() resolved', () => {
  sweepStoppedOver(postgresConnections('ccb'));
});

describeWithService('Redis', 'RedisStore over an ioredis client quit once close() resolved', () => {
  sweepStoppedOver(redisConnections('ccb'));
});

describeWithService('MariaDB', 'MysqlStore over a mysql2 pool ended once close() resolved', () => {
  const tables = new Set<string>();
  const pool = () => createPool({ uri: mysqlUrl(), connectionLimit: 4 });
  afterAll(async () => {
    const cleanup = pool();
    await dropMysqlInboxes(cleanup, [...tables]);
    await cleanup.end();
  }, CLEANUP_TIMEOUT_MS);

  sweepStoppedOver(async (space) => {
    const table = `ipn_test_ccb_${process.pid}_${space}`;
    const made = pool();
    const store = new MysqlStore({ pool: made, table });
    if (!tables.has(table)) await store.migrate();
    tables.add(table);
    return { store, end: () => made.end() };
  });
});

describe('SqliteStore over a database closed once close() resolved', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ipn-ccb-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  sweepStoppedOver(async (space) => {
    const database = new Database(join(dir, `${space}.db`));
    const store = new SqliteStore({ database });
    await store.migrate();
    return { store, end: () => Promise.resolve(void database.close()) };
  });
});

// ipn.reconcile() settles the expectation it read before delivering (3), where a late settle reads what the
// store holds then (2): at least once, the delivery runs the listeners, seconds during which the partner may
// call ipn.expect() again for the transaction (the amount corrected).
test('at-least-once: an ipn.expect() made while ipn.reconcile() delivers is kept, and its contradiction said', async () => {
  const id = await paid(t.provider);
  const data = new MemoryStore();
  const settings = { statusClient: statusClientOf(t.provider), delivery: 'at-least-once' as const };
  const { ipn, recorder } = await t.serve(quietRouter({ store: data, ...settings }));
  await ipn.expect(id, { amount: 100 });
  const { gate, open } = latch();
  let crediting = false;
  ipn.on('successful', async () => {
    crediting = true;
    await gate;
  });
  const reconciled = ipn.reconcile(id);
  await until(() => crediting, 'the listener crediting');
  await ipn.expect(id, { amount: 200 }); // corrected while the record is credited
  open();
  await expect(reconciled).resolves.toMatchObject({ emitted: true, rejected: false });
  await settle();
  expect(data.expectations.get(id)).toMatchObject({ amount: 200 });
  expect(data.expectations.get(id)?.attempts).toBeGreaterThanOrEqual(1_000_000_000);
  expect(recorder.of('rejected')).toMatchObject([{ reason: 'mismatch', mismatches: ['amount'] }]);
  expect(t.unhandled).toEqual([]);
});

// The sweep writes a rejected expectation before it says so (`rejected`); ipn.reconcile() said it first,
// then wrote the expectation it had read: a listener of `rejected` that corrects the expectation (the order's
// amount was changed) saw its ipn.expect() written over, settled as rejected, never asked about again.
test('ipn.reconcile(): an expectation corrected by a listener of its rejected event is kept, and the sweep credits it', async () => {
  const id = await paid(t.provider);
  const data = new MemoryStore();
  const settings = { statusClient: statusClientOf(t.provider), reconcileAfterMs: 1 };
  const { ipn, recorder } = await t.serve(quietRouter({ store: data, ...settings }));
  await ipn.expect(id, { amount: 5_000 });
  let corrected: Promise<void> | undefined;
  ipn.on('rejected', () => {
    corrected ??= ipn.expect(id, { amount: 100 }); // the order's amount, corrected
  });
  await expect(ipn.reconcile(id)).resolves.toMatchObject({ emitted: false, rejected: true });
  await corrected;
  await settle();
  expect(data.expectations.get(id)).toMatchObject({ amount: 100, attempts: 0 });
  await new Promise((resolve) => setTimeout(resolve, 5));
  expect(await ipn.sweep()).toMatchObject({ reconciled: 1 });
  expect(recorder.count('successful')).toBe(1);
  expect(t.unhandled).toEqual([]);
});

// The sweep takes an expectation, asks the service (seconds), then writes what the record makes of it: an
// ipn.expect() of the transaction made during that query (the amount corrected) was written over by the
// expectation as taken, settled as rejected, and the payment it now matches never credited.
test('the sweep: an expectation corrected while its status query runs is not written over as rejected; the next pass credits it', async () => {
  const id = await paid(t.provider);
  const data = new MemoryStore();
  const held = firstQueryHeld();
  const { statusClient, open } = held;
  const { ipn, recorder } = await t.serve(quietRouter({ store: data, statusClient, reconcileAfterMs: 1 }));
  await ipn.expect(id, { amount: 5_000 });
  await new Promise((resolve) => setTimeout(resolve, 5));
  const swept = ipn.sweep();
  await until(() => held.querying, 'the sweep querying');
  await ipn.expect(id, { amount: 100 }); // the order's amount, corrected
  open();
  await swept;
  await settle();
  expect(data.expectations.get(id)).toMatchObject({ amount: 100 });
  expect(recorder.count('rejected')).toBe(0);
  await new Promise((resolve) => setTimeout(resolve, 5));
  expect(await ipn.sweep()).toMatchObject({ reconciled: 1 });
  expect(recorder.count('successful')).toBe(1);
  expect(t.unhandled).toEqual([]);
});

// The sweep credits the record, its listeners run (at least once), then it settles the expectation it took:
// an ipn.expect() made meanwhile was written over, as a late settle no longer does.
test('at-least-once: an ipn.expect() made while the sweep delivers is kept, and its contradiction said', async () => {
  const id = await paid(t.provider);
  const data = new MemoryStore();
  const settings = {
    statusClient: statusClientOf(t.provider),
    delivery: 'at-least-once' as const,
    reconcileAfterMs: 1,
  };
  const { ipn, recorder } = await t.serve(quietRouter({ store: data, ...settings }));
  await ipn.expect(id, { amount: 100 });
  const { gate, open } = latch();
  let crediting = false;
  ipn.on('successful', async () => {
    crediting = true;
    await gate;
  });
  await new Promise((resolve) => setTimeout(resolve, 5));
  const swept = ipn.sweep();
  await until(() => crediting, 'the listener crediting');
  await ipn.expect(id, { amount: 200 }); // corrected while the record is credited
  open();
  await expect(swept).resolves.toMatchObject({ reconciled: 1 });
  await settle();
  expect(data.expectations.get(id)).toMatchObject({ amount: 200 });
  expect(data.expectations.get(id)?.attempts).toBeGreaterThanOrEqual(1_000_000_000);
  expect(recorder.of('rejected')).toMatchObject([{ reason: 'mismatch', mismatches: ['amount'] }]);
  expect(t.unhandled).toEqual([]);
});
