import { randomUUID } from 'node:crypto';
import { Pool } from 'pg';
import { MemoryStore, type Store } from 'ipn-kit';
import { PostgresStore } from '../../lib/postgres.js';
import { CLEANUP_TIMEOUT_MS, dropPostgresInboxes } from '../helpers/drop-inboxes.js';
import { settle } from '../helpers/servers.js';
import { databaseUrl, describeWithService } from '../helpers/services.js';
import {
  latch,
  paid,
  perTestService,
  quietRouter,
  statusClientOf,
  untilFirst,
} from '../helpers/verified-payments.js';

// ipn.close() at most once with verify: a notification answered 200 and still being verified is let go (its
// key released, its expectation made due again), so that the service's resend or the sweep delivers it after
// the restart. Those writes are the router's own, started by close() itself: it must wait for them before it
// closes the store, else they run into a closed pool (the host ends it once close() resolved), the key stays
// claimed for ttlMs, the resend is answered as a duplicate, and the payment is lost.

const t = perTestService({ unhandled: true });

/** A verification that never answers: the service is down. */
const neverAnswers = { getStatus: () => new Promise<never>(() => {}) };

/**
 * The first attempt gives up quickly (a retry scheduled far off): the copy waits in memory, as it would
 * mid-backoff, when close() comes.
 */
const verifying = { verifyTimeoutMs: 20, verifyRetryDelayMs: 60 * 60_000 };

/**
 * `data` seen through a pool the host ends once `ipn.close()` resolved (the store's `close()` here): every
 * call after it throws. `release` and the expectations' `put` take a while (`writeMs`), or never answer.
 */
function pooled(data: MemoryStore, writes: { writeMs?: number; hang?: boolean } = {}): Store {
  // `writes.hang` is read at each call: a test sets it once the router is serving.
  let ended = false;
  const use = <T>(call: () => T): T => {
    if (ended) throw new Error('Cannot use a pool after calling end on the pool');
    return call();
  };
  const slowly = <T>(call: () => T): Promise<T> =>
    writes.hang === true
      ? new Promise<never>(() => {})
      : new Promise((resolve) => setTimeout(resolve, writes.writeMs ?? 0)).then(() => use(call));
  const wrap = (target: object, slow: string): object =>
    new Proxy(target, {
      get(on, name) {
        const value: unknown = Reflect.get(on, name);
        if (typeof value !== 'function') return value;
        const method = value as (...args: unknown[]) => unknown;
        if (name === slow) return (...args: unknown[]) => slowly(() => method.apply(on, args));
        return (...args: unknown[]) => use(() => method.apply(on, args));
      },
    });
  const expectations = wrap(data.expectations, 'put');
  const store = wrap(data, 'release');
  return new Proxy(store, {
    get(on, name) {
      if (name === 'expectations') return expectations;
      if (name === 'close') return () => void (ended = true);
      return Reflect.get(on, name);
    },
  }) as Store;
}

/** Whether the expectation of `id` in `data` is due for the sweep now. */
const dueIn = (data: MemoryStore, id: string): boolean =>
  (data.expectations.get(id)?.dueAt ?? Infinity) <= Date.now();

test('at-most-once verify: close() waits for the release and the expectation write it started: the resend after the restart is credited once', async () => {
  const id = await paid(t.provider);
  const data = new MemoryStore();
  const store = pooled(data, { writeMs: 30 });
  const { ipn, recorder, url } = await t.serve(quietRouter({ store, verify: neverAnswers, ...verifying }));
  await ipn.expect(id, { amount: 100 });
  expect(await t.provider.forge({ ipnUrl: url, transactionId: id })).toBe(200);
  await t.running?.close();
  t.running = undefined;
  await ipn.close({ timeoutMs: 5_000 });
  t.ipn = undefined;
  await new Promise((resolve) => setTimeout(resolve, 60)); // the writes, had close() not waited, fail now
  await settle();
  expect(recorder.count('successful')).toBe(0);
  const failed = recorder.of('error').map((e: { error: Error }) => e.error.message);
  expect(failed.filter((m: string) => m.includes('the pool'))).toEqual([]);
  expect(dueIn(data, id)).toBe(true); // the sweep asks about it again
  // The next process over the same data: the service's resend is no duplicate; credited once.
  const next = await t.serve(quietRouter({ store: pooled(data), verify: statusClientOf(t.provider) }));
  expect(await t.provider.forge({ ipnUrl: next.url, transactionId: id })).toBe(200);
  await untilFirst(next.recorder, 'successful', 'credited');
  expect(next.recorder.count('duplicate')).toBe(0);
  expect(next.recorder.count('successful')).toBe(1);
  expect(t.unhandled).toEqual([]);
});

test('at-most-once verify: a write close() started that never answers holds it no longer than timeoutMs: reported', async () => {
  const id = await paid(t.provider);
  const writes = { hang: false };
  const store = pooled(new MemoryStore(), writes);
  const { ipn, recorder, url } = await t.serve(quietRouter({ store, verify: neverAnswers, ...verifying }));
  await ipn.expect(id, { amount: 100 });
  expect(await t.provider.forge({ ipnUrl: url, transactionId: id })).toBe(200);
  writes.hang = true; // the database stops answering
  await t.running?.close();
  t.running = undefined;
  await ipn.close({ timeoutMs: 50 }); // resolves: the hanging release is reported, not waited on
  t.ipn = undefined;
  await settle();
  const failed = recorder.of('error').map((e: { error: Error }) => e.error.message);
  expect(failed.some((m: string) => /store write/.test(m) && /still running after 50 ms/.test(m))).toBe(true);
  expect(t.unhandled).toEqual([]);
});

// A claim that commits but answers after storeTimeoutMs (answered 503, delivered late) lands while the router
// closes: the router closed, verification's start lets it go (its key released). A release after the store
// closed is lost: the service's resend, after the 503, would be a duplicate of a payment nobody delivers.
test('at-most-once verify: a claim landing late while close() runs is let go before the store closes: the resend is credited once', async () => {
  const id = await paid(t.provider);
  const data = new MemoryStore();
  const store = pooled(data);
  const { gate, open } = latch();
  const claim = data.claim.bind(data);
  let slow = true;
  (data as unknown as Record<string, unknown>).claim = (key: string, ttlMs: number, token?: string) => {
    const claimed = claim(key, ttlMs, token);
    if (!slow || !key.startsWith(id)) return claimed;
    slow = false;
    return gate.then(() => claimed); // committed now, answered late
  };
  const settings = { verify: statusClientOf(t.provider), storeTimeoutMs: 20 };
  const { ipn, recorder, url } = await t.serve(quietRouter({ store, ...settings }));
  expect(await t.provider.forge({ ipnUrl: url, transactionId: id })).toBe(503);
  await t.running?.close();
  t.running = undefined;
  const closed = ipn.close({ timeoutMs: 5_000 });
  setTimeout(open, 50); // the claim's answer lands while close() runs
  await closed;
  t.ipn = undefined;
  await settle();
  expect(recorder.count('successful')).toBe(0);
  const failed = recorder.of('error').map((e: { error: Error }) => e.error.message);
  expect(failed.filter((m: string) => m.includes('the pool'))).toEqual([]);
  const next = await t.serve(quietRouter({ store: pooled(data), ...settings }));
  expect(await t.provider.forge({ ipnUrl: next.url, transactionId: id })).toBe(200);
  await untilFirst(next.recorder, 'successful', 'credited');
  expect(next.recorder.count('duplicate')).toBe(0);
  expect(next.recorder.count('successful')).toBe(1);
  expect(t.unhandled).toEqual([]);
});

describeWithService('PostgreSQL', 'PostgresStore over a pg Pool ended once close() resolved', () => {
  const table = `ipn_test_caw_${process.pid}_${randomUUID().slice(0, 6)}`;
  const pools: Pool[] = [];
  const pool = (): Pool => {
    const made = new Pool({ connectionString: databaseUrl(), max: 4 });
    pools.push(made);
    return made;
  };

  beforeAll(async () => {
    await new PostgresStore({ pool: pool(), table }).migrate();
  });
  afterAll(async () => {
    const cleanup = pool();
    await dropPostgresInboxes(cleanup, [table]);
    await Promise.all(pools.map((p) => p.end().catch(() => undefined)));
  }, CLEANUP_TIMEOUT_MS);

  test('at-most-once verify: the claim close() let go is gone and the expectation due; the resend is credited once', async () => {
    const id = await paid(t.provider);
    const first = new Pool({ connectionString: databaseUrl(), max: 4 });
    const store = new PostgresStore({ pool: first, table });
    const { ipn, recorder, url } = await t.serve(quietRouter({ store, verify: neverAnswers, ...verifying }));
    await ipn.expect(id, { amount: 100 });
    expect(await t.provider.forge({ ipnUrl: url, transactionId: id })).toBe(200);
    await t.running?.close();
    t.running = undefined;
    await ipn.close({ timeoutMs: 5_000 });
    t.ipn = undefined;
    await first.end(); // the host's shutdown: its pool, once the router closed
    await settle();
    const failed = recorder.of('error').map((e: { error: Error }) => e.error.message);
    expect(failed.filter((m: string) => m.includes('pool'))).toEqual([]);
    const again = new PostgresStore({ pool: pool(), table });
    expect((await again.expectations.get(id))?.dueAt).toBeLessThanOrEqual(Date.now());
    const next = await t.serve(quietRouter({ store: again, verify: statusClientOf(t.provider) }));
    const nextEvents = next.recorder;
    expect(await t.provider.forge({ ipnUrl: next.url, transactionId: id })).toBe(200);
    await untilFirst(nextEvents, 'successful', 'credited');
    expect(nextEvents.count('duplicate')).toBe(0);
    expect(nextEvents.count('successful')).toBe(1);
    expect(t.unhandled).toEqual([]);
  });
});
