import { createDurableDelivery } from '../../../lib/delivery/durable-delivery.js';
import { keyOf } from '../../../lib/delivery/delivery-context.js';
import type { Options } from '../../../lib/config/options.js';
import type { DeliveryTransaction } from '../../../lib/stores/store.js';
import { StatusRateLimitError, TransactionNotFoundError } from '../../../lib/shared/errors.js';
import type { IpnNotification } from '../../../lib/notification/schema.js';
import { MemoryInbox } from '../../helpers/memory-inbox.js';
import { deliveryHarness, uniqueNotification } from '../../helpers/delivery-context.js';
import { until } from '../../helpers/until.js';

const LEASE = 60_000;

beforeEach(() => {
  jest.useFakeTimers({ now: new Date('2026-01-01T00:00:00Z') });
});
afterEach(() => {
  jest.useRealTimers();
});

/** Lets the timers due by now and every promise chain they start run, on the fake clock. */
async function settle(): Promise<void> {
  for (let turn = 0; turn < 50; turn += 1) await jest.advanceTimersByTimeAsync(0);
}

function setup(options: Partial<Options> = {}, inbox = new MemoryInbox()) {
  const harness = deliveryHarness({
    store: inbox,
    delivery: 'at-least-once',
    retryDelayMs: 1_000,
    maxAttempts: 3,
    leaseMs: LEASE,
    storeTimeoutMs: 500,
    ...options,
  });
  const durable = createDurableDelivery(harness.context, inbox);
  durable.start(); // as the router does on first use, or right after it is built
  /** Stores `n` as the router does before its 200, and returns what `deliver` needs. */
  async function received(n: IpnNotification, leaseId = 'first-attempt') {
    expect(await inbox.receive(keyOf(n), { ...n }, { id: leaseId, ms: LEASE })).toBe(true);
    return { key: keyOf(n), leaseId };
  }
  return { ...harness, inbox, durable, received };
}

describe('createDurableDelivery: one attempt', () => {
  test('a delivery whose listeners all succeed is marked delivered, and they learn the key and attempt', async () => {
    const { ipn, inbox, durable, received } = setup();
    const n = uniqueNotification();
    const seen: unknown[] = [];
    ipn.on('successful', (event, context) => void seen.push([event.transaction_id, context]));
    const { key, leaseId } = await received(n);

    expect(await durable.deliver(key, n, leaseId, 1)).toBe(true);
    expect(seen).toEqual([
      [n.transaction_id, { key, idempotencyKey: expect.stringMatching(/^[0-9a-f]{64}$/), attempt: 1 }],
    ]);
    expect(inbox.entries.get(key)).toMatchObject({ status: 'delivered', attempts: 1, lastError: null });
  });

  test('a delivery whose listener throws is retried after retryDelayMs and goes dead after maxAttempts', async () => {
    const { ipn, inbox, durable, received, of } = setup({ maxAttempts: 2 });
    const n = uniqueNotification();
    let calls = 0;
    ipn.on('successful', () => {
      calls += 1;
      throw new Error('ledger down');
    });
    const { key, leaseId } = await received(n);

    expect(await durable.deliver(key, n, leaseId, 1)).toBe(false);
    expect(inbox.entries.get(key)).toMatchObject({
      status: 'failed',
      lastError: "a listener of 'successful' failed: ledger down",
      nextAttemptAt: new Date(Date.now() + 1_000),
    });
    expect(of('error').map((e) => e.error.code)).toEqual(['IPN_DELIVERY_FAILED']);

    await jest.advanceTimersByTimeAsync(999);
    expect(calls).toBe(1); // not before retryDelayMs
    // The next batch is asked for by a 0 ms timer, which fires a millisecond later (as Node's does).
    await jest.advanceTimersByTimeAsync(1);
    await settle();
    expect(calls).toBe(2);
    expect(inbox.entries.get(key)).toMatchObject({ status: 'dead', attempts: 2 });
    expect(of('dead')).toEqual([
      expect.objectContaining({
        key,
        attempts: 2,
        lastError: "a listener of 'successful' failed: ledger down",
      }),
    ]);
  });

  test('each retry waits twice as long as the one before', async () => {
    const { ipn, inbox, durable, received } = setup({ maxAttempts: 5 });
    const n = uniqueNotification();
    ipn.on('successful', () => Promise.reject(new Error('ledger down')));
    const { key, leaseId } = await received(n);
    await durable.deliver(key, n, leaseId, 3);
    expect(inbox.entries.get(key)?.nextAttemptAt).toEqual(new Date(Date.now() + 4_000));
  });

  test('with no listener at all, the attempt fails saying which listener to add', async () => {
    const { inbox, durable, received } = setup();
    const n = uniqueNotification();
    const { key, leaseId } = await received(n);
    expect(await durable.deliver(key, n, leaseId, 1)).toBe(false);
    expect(inbox.entries.get(key)?.lastError).toBe(
      `no listener for ${key}: add ipn.on('successful', ...) before the router starts`,
    );
  });

  test('listeners that never settle fail the attempt at 0.9 leaseMs, before the lease runs out', async () => {
    const { ipn, inbox, durable, received } = setup();
    const n = uniqueNotification();
    ipn.on('successful', () => new Promise<void>(() => {}));
    const { key, leaseId } = await received(n);
    const attempt = durable.deliver(key, n, leaseId, 1);
    await jest.advanceTimersByTimeAsync(LEASE * 0.9);
    expect(await attempt).toBe(false);
    expect(inbox.entries.get(key)).toMatchObject({
      status: 'failed',
      lastError: `the listeners of ${key} did not settle within 54000 ms (leaseMs)`,
    });
  });

  test('an attempt whose lease was lost emits no dead: the holder of the lease decides', async () => {
    const { ipn, inbox, durable, received, of } = setup({ maxAttempts: 1 });
    const n = uniqueNotification();
    ipn.on('successful', () => Promise.reject(new Error('ledger down')));
    const { key } = await received(n, 'the-other-instance');
    expect(await durable.deliver(key, n, 'a-lost-lease', 1)).toBe(false);
    expect(of('dead')).toEqual([]);
    expect(inbox.entries.get(key)).toMatchObject({ status: 'received', lastError: null });
  });

  test('a delivered mark the store fails to record is an error event; the entry stays to be taken up again', async () => {
    const { ipn, inbox, durable, received, of } = setup();
    const n = uniqueNotification();
    ipn.on('successful', () => {});
    const { key, leaseId } = await received(n);
    inbox.failNext('settle');
    // Delivered: the listeners ran. Only the mark is lost, and the store's failure is reported.
    expect(await durable.deliver(key, n, leaseId, 1)).toBe(false);
    expect(of('error')).toHaveLength(1);
    expect(of('error')[0].error).toMatchObject({ code: 'IPN_STORE_FAILED' });
    expect(of('error')[0].error.message).toMatch(`the store failed to record the delivery of ${key}`);
    expect(inbox.entries.get(key)?.status).toBe('received');
  });

  test('a store call that never answers is given up after storeTimeoutMs and reported', async () => {
    const { ipn, inbox, durable, received, of } = setup();
    const n = uniqueNotification();
    ipn.on('successful', () => {});
    const { key, leaseId } = await received(n);
    inbox.settle = () => new Promise<never>(() => {});
    const attempt = durable.deliver(key, n, leaseId, 1);
    await jest.advanceTimersByTimeAsync(500);
    expect(await attempt).toBe(false);
    expect(of('error')[0].error.message).toMatch(
      `the store's settle for ${key} did not answer within 500 ms (storeTimeoutMs)`,
    );
  });

  test('a notification the status service does not know, twice, is rejected and its entry released', async () => {
    const getStatus = jest.fn(() => Promise.reject(new TransactionNotFoundError('unknown')));
    const { ipn, inbox, durable, received, of } = setup({ verify: { getStatus } });
    const n = uniqueNotification();
    const credited = jest.fn();
    ipn.on('successful', credited);
    const { key, leaseId } = await received(n);
    // The first not-found is believed only from the second attempt on (the service's replicas may lag).
    expect(await durable.deliver(key, n, leaseId, 1)).toBe(false);
    expect(inbox.entries.get(key)?.status).toBe('failed');
    const retry = await inbox.lease({ id: 'retry', ms: LEASE }, 10);
    expect(retry).toHaveLength(0); // not due before retryDelayMs
    jest.setSystemTime(Date.now() + 1_000);
    expect(await inbox.lease({ id: 'retry', ms: LEASE }, 10)).toHaveLength(1);
    expect(await durable.deliver(key, n, 'retry', 2)).toBe(false);
    expect(of('rejected')).toEqual([expect.objectContaining({ reason: 'not_found' })]);
    expect(credited).not.toHaveBeenCalled();
    expect(inbox.entries.get(key)).toBeUndefined();
  });
});

describe("createDurableDelivery: a refusal's retryAfterMs", () => {
  // A custom source's refusal that says NaN, Infinity or a negative wait: the usual backoff (NaN and Infinity
  // were an invalid nextAttemptAt); a huge one: a day, the longest the status client itself obeys.
  for (const [said, waited] of [
    [Number.NaN, 1_000],
    [Number.POSITIVE_INFINITY, 1_000],
    [-5, 1_000],
    [1e300, 24 * 60 * 60_000],
  ] as const) {
    test(`${said} puts the next attempt ${waited} ms later`, async () => {
      const n = uniqueNotification();
      const getStatus = () => Promise.reject(new StatusRateLimitError(n.transaction_id, 'budget', said));
      const { inbox, durable, received } = setup({ verify: { getStatus } });
      const { key, leaseId } = await received(n);
      const now = Date.now();
      expect(await durable.deliver(key, n, leaseId, 1, 'drain')).toBe(false);
      const entry = inbox.entries.get(key);
      expect(entry?.status).toBe('failed');
      expect(entry?.nextAttemptAt.getTime()).toBe(now + waited);
    });
  }
});

describe('createDurableDelivery: the delivery transaction', () => {
  /** A store transaction that records what was done with it. */
  function transactional(
    commit: () => Promise<'delivered' | 'lost' | { landed: string }>,
    state: 'idle' | 'open' = 'open',
    rolledBack?: { landed: string },
  ) {
    const done: string[] = [];
    const inbox = new MemoryInbox();
    const tx: DeliveryTransaction<string> = {
      tx: 'the client',
      state,
      commit: () => {
        done.push('commit');
        return commit();
      },
      rollback: (listeners) => {
        done.push(listeners ? 'abandon' : 'rollback');
        return Promise.resolve(rolledBack);
      },
    };
    Object.assign(inbox, { begin: () => Promise.resolve(tx) });
    return { inbox, done, tx };
  }

  test('listeners get the transaction as tx, and the attempt commits it instead of settling', async () => {
    const { inbox, done } = transactional(() => Promise.resolve('delivered'));
    const { ipn, durable, received } = setup({}, inbox);
    const settle = jest.spyOn(inbox, 'settle');
    const n = uniqueNotification();
    const dbs: unknown[] = [];
    ipn.on('successful', (_event, context) => void dbs.push([context.tx, context.db]));
    const { key, leaseId } = await received(n);
    expect(await durable.deliver(key, n, leaseId, 1)).toBe(true);
    expect(dbs).toEqual([['the client', undefined]]);
    expect(done).toEqual(['commit']);
    expect(settle).not.toHaveBeenCalled();
  });

  test('a listener that throws rolls the transaction back, and the attempt is settled failed', async () => {
    const { inbox, done } = transactional(() => Promise.resolve('delivered'));
    const { ipn, durable, received } = setup({}, inbox);
    const n = uniqueNotification();
    ipn.on('successful', () => Promise.reject(new Error('ledger down')));
    const { key, leaseId } = await received(n);
    expect(await durable.deliver(key, n, leaseId, 1)).toBe(false);
    expect(done).toEqual(['rollback']);
    expect(inbox.entries.get(key)?.status).toBe('failed');
  });

  // rollback() resolved nothing until { landed } came; a store of one's own (in JavaScript) may well resolve
  // what its driver gave, such as pg's result of ROLLBACK: not a landed commit, a failure retried as before.
  test("a rollback that resolves something else (a driver's result of ROLLBACK): failed and retried, not dead", async () => {
    const driverResult = { command: 'ROLLBACK', rowCount: null, rows: [] } as unknown as { landed: string };
    const { inbox, done } = transactional(() => Promise.resolve('delivered'), 'open', driverResult);
    const { ipn, durable, received, of } = setup({ maxAttempts: 3 }, inbox);
    const n = uniqueNotification();
    ipn.on('successful', () => Promise.reject(new Error('ledger down')));
    const { key, leaseId } = await received(n);
    expect(await durable.deliver(key, n, leaseId, 1)).toBe(false);
    expect(done).toEqual(['rollback']);
    expect(inbox.entries.get(key)).toMatchObject({
      status: 'failed',
      lastError: "a listener of 'successful' failed: ledger down",
    });
    expect(of('dead')).toEqual([]);
  });

  test('a rollback that outruns storeTimeoutMs, then finds a landed commit: the entry is settled dead then', async () => {
    const { inbox, tx } = transactional(() => Promise.resolve('delivered'));
    const landed = 'a listener had committed the delivery transaction itself';
    let answer!: (value: { landed: string }) => void;
    tx.rollback = () => new Promise((resolve) => (answer = resolve));
    const { ipn, durable, received, of } = setup({ maxAttempts: 3 }, inbox);
    const n = uniqueNotification();
    ipn.on('successful', () => Promise.reject(new Error('ledger down')));
    const { key, leaseId } = await received(n);
    const attempt = durable.deliver(key, n, leaseId, 1);
    await jest.advanceTimersByTimeAsync(500);
    expect(await attempt).toBe(false);
    expect(of('error')[0].error.message).toMatch('rollback');
    expect(inbox.entries.get(key)?.status).not.toBe('dead'); // left to its lease, for now
    answer({ landed });
    await settle();
    const lastError = `a listener of 'successful' failed: ledger down; ${landed}`;
    expect(inbox.entries.get(key)).toMatchObject({ status: 'dead', lastError });
    expect(of('dead')).toEqual([expect.objectContaining({ key, attempts: 1, lastError })]);
  });

  test("a rollback that finds the listeners' writes committed by a listener: dead at once, never retried", async () => {
    const landed = 'a listener had committed the delivery transaction itself';
    const { inbox, done } = transactional(() => Promise.resolve('delivered'), 'open', { landed });
    const { ipn, durable, received, of } = setup({ maxAttempts: 3 }, inbox);
    const n = uniqueNotification();
    const credited = jest.fn(() => Promise.reject(new Error('ledger down')));
    ipn.on('successful', credited);
    const { key, leaseId } = await received(n);
    expect(await durable.deliver(key, n, leaseId, 1)).toBe(false);
    expect(done).toEqual(['rollback']);
    const lastError = `a listener of 'successful' failed: ledger down; ${landed}`;
    expect(inbox.entries.get(key)).toMatchObject({ status: 'dead', lastError });
    expect(of('dead')).toEqual([expect.objectContaining({ key, attempts: 1, lastError })]);
    expect(of('error').map((event) => event.error.message)).toEqual([lastError]);
    await jest.advanceTimersByTimeAsync(10_000);
    await settle();
    expect(credited).toHaveBeenCalledTimes(1);
  });

  test('a commit that finds the writes landed outside the transaction: dead at once, never retried', async () => {
    const landed = 'a listener ended the delivery transaction itself';
    const { inbox, done } = transactional(() => Promise.resolve({ landed }));
    const { ipn, durable, received, of } = setup({ maxAttempts: 3 }, inbox);
    const n = uniqueNotification();
    const credited = jest.fn();
    ipn.on('successful', credited);
    const { key, leaseId } = await received(n);
    expect(await durable.deliver(key, n, leaseId, 1)).toBe(false);
    expect(done).toEqual(['commit']);
    expect(inbox.entries.get(key)).toMatchObject({ status: 'dead', lastError: landed });
    expect(of('dead')).toEqual([expect.objectContaining({ key, attempts: 1, lastError: landed })]);
    expect(of('error').map((event) => event.error.message)).toEqual([landed]);
    await jest.advanceTimersByTimeAsync(10_000);
    await settle();
    expect(credited).toHaveBeenCalledTimes(1);
  });

  test('a commit that fails is a failed attempt, its connection abandoned, and goes dead at maxAttempts', async () => {
    const { inbox, done } = transactional(() => Promise.reject(new Error('connection reset')));
    const { ipn, durable, received, of } = setup({ maxAttempts: 1 }, inbox);
    const n = uniqueNotification();
    ipn.on('successful', () => {});
    const { key, leaseId } = await received(n);
    expect(await durable.deliver(key, n, leaseId, 1)).toBe(false);
    expect(done).toEqual(['commit', 'abandon']);
    expect(of('dead')[0].lastError).toBe(
      `the delivery transaction of ${key} did not commit: connection reset`,
    );
  });

  test('a commit whose answer was lost, though it landed, is settled by reading the entry: delivered', async () => {
    let land = async (): Promise<void> => {};
    const { inbox } = transactional(async () => {
      await land(); // the mark and the COMMIT landed...
      throw new Error('connection reset'); // ...and the answer never came back
    });
    const { ipn, durable, received, of } = setup({ maxAttempts: 1 }, inbox);
    const n = uniqueNotification();
    ipn.on('successful', () => {});
    const { key, leaseId } = await received(n);
    land = async () => void (await inbox.settle(key, leaseId, { status: 'delivered' }));
    expect(await durable.deliver(key, n, leaseId, 1)).toBe(true);
    expect(inbox.entries.get(key)?.status).toBe('delivered');
    expect(of('error')).toEqual([]);
    expect(of('dead')).toEqual([]);
  });

  test('a transaction no listener opened fails as a store failure, not as a failed attempt', async () => {
    const { inbox, done } = transactional(() => Promise.reject(new Error('batch failed')), 'idle');
    const { ipn, durable, received, of } = setup({ maxAttempts: 1 }, inbox);
    const n = uniqueNotification();
    ipn.on('successful', () => {});
    const { key, leaseId } = await received(n);
    expect(await durable.deliver(key, n, leaseId, 1)).toBe(false);
    expect(done).toEqual(['commit']);
    expect(of('dead')).toEqual([]);
    expect(of('error')[0].error).toMatchObject({ code: 'IPN_STORE_FAILED' });
    expect(inbox.entries.get(key)?.status).toBe('received');
  });

  test('a commit that finds its lease lost (its writes rolled back) is not counted as delivered by drain()', async () => {
    // PostgresStore's commit resolves false when another process took the entry meanwhile: it rolled back
    // the listeners' writes, so this attempt delivered nothing; the holder of the lease delivers it.
    const { inbox, done } = transactional(() => Promise.resolve('lost'));
    const { ipn, durable, received } = setup({ recoveryIntervalMs: 3_600_000 }, inbox);
    ipn.on('successful', () => {});
    await settle(); // the first recovery round: nothing is due yet
    const n = uniqueNotification();
    const { key } = await received(n, 'a-crashed-process');
    jest.setSystemTime(Date.now() + LEASE + 1); // its lease ran out; no timer fires
    expect(await durable.drain(Number.POSITIVE_INFINITY)).toEqual({
      delivered: 0,
      retried: 0,
      dead: 0,
      left: 0,
    });
    expect(done).toEqual(['commit']);
    expect(inbox.entries.get(key)?.status).not.toBe('delivered');
  });

  test('a begin that answers after storeTimeoutMs: the attempt fails, and the late transaction is rolled back', async () => {
    const { inbox, done } = transactional(() => Promise.resolve('delivered'));
    let open: (() => void) | undefined;
    const late = (inbox as unknown as { begin: () => Promise<unknown> }).begin;
    Object.assign(inbox, {
      begin: () => new Promise((resolve) => (open = () => resolve(late()))),
    });
    const { ipn, durable, received } = setup({}, inbox);
    const n = uniqueNotification();
    const credited = jest.fn();
    ipn.on('successful', credited);
    const { key, leaseId } = await received(n);
    const attempt = durable.deliver(key, n, leaseId, 1);
    await jest.advanceTimersByTimeAsync(500);
    expect(await attempt).toBe(false);
    expect(inbox.entries.get(key)?.lastError).toMatch(/begin for .* did not answer within 500 ms/);
    open!();
    await settle();
    expect(done).toEqual(['rollback']);
    expect(credited).not.toHaveBeenCalled();
  });
});

describe('createDurableDelivery: recovery', () => {
  test('at start, entries left due are taken up and delivered, with their attempt number', async () => {
    const inbox = new MemoryInbox();
    const n = uniqueNotification();
    await inbox.receive(keyOf(n), { ...n }, { id: 'crashed', ms: 1 });
    jest.setSystemTime(Date.now() + 2); // the crashed instance's lease has run out
    const { ipn } = setup({}, inbox);
    const attempts: number[] = [];
    ipn.on('successful', (_event, context) => void attempts.push(context.attempt));
    await settle();
    expect(attempts).toEqual([2]);
    expect(inbox.entries.get(keyOf(n))?.status).toBe('delivered');
  });

  test('more entries than one batch (50) are all taken up, batch after batch', async () => {
    const inbox = new MemoryInbox();
    const all = Array.from({ length: 51 }, () => uniqueNotification());
    for (const n of all) await inbox.receive(keyOf(n), { ...n }, { id: 'crashed', ms: 1 });
    jest.setSystemTime(Date.now() + 2);
    const { ipn } = setup({}, inbox);
    ipn.on('successful', () => {});
    await settle();
    // The next batch is asked for by a 0 ms timer, which fires a millisecond later (as Node's does).
    await jest.advanceTimersByTimeAsync(1);
    await settle();
    expect(inbox.entries.values().filter((e) => e.status === 'delivered')).toHaveLength(51);
  });

  test('a stored record that is not a notification goes dead at once, without any listener call', async () => {
    const inbox = new MemoryInbox();
    await inbox.receive('EFB.broken:SUCCESSFUL', { nonsense: true }, { id: 'crashed', ms: 1 });
    jest.setSystemTime(Date.now() + 2);
    const { ipn } = setup({}, inbox);
    const credited = jest.fn();
    ipn.on('successful', credited);
    await settle();
    expect(inbox.entries.get('EFB.broken:SUCCESSFUL')).toMatchObject({
      status: 'dead',
      lastError: 'the stored record of EFB.broken:SUCCESSFUL is not a notification',
    });
    expect(credited).not.toHaveBeenCalled();
  });

  test('a lease the store fails is reported, and the next round (recoveryIntervalMs) takes the entry up', async () => {
    const inbox = new MemoryInbox();
    const n = uniqueNotification();
    await inbox.receive(keyOf(n), { ...n }, { id: 'crashed', ms: 1 });
    jest.setSystemTime(Date.now() + 2);
    inbox.failNext('lease');
    const { ipn, of } = setup({ recoveryIntervalMs: 5_000 }, inbox);
    ipn.on('successful', () => {});
    await settle();
    expect(of('error')[0].error.message).toMatch(/the store failed to hand out undelivered notifications/);
    expect(inbox.entries.get(keyOf(n))?.status).toBe('received');
    await jest.advanceTimersByTimeAsync(5_000);
    await settle();
    expect(inbox.entries.get(keyOf(n))?.status).toBe('delivered');
  });

  test.each([
    ['no list', undefined],
    ['a list holding null', [null]],
  ])(
    'a (custom) store whose lease() resolves %s is reported by recovery and by drain(), never an unhandled rejection',
    async (_, handedOut) => {
      jest.useRealTimers(); // Node reports unhandled rejections between real turns of the event loop
      const unhandled: unknown[] = [];
      const onUnhandled = (reason: unknown): number => unhandled.push(reason);
      process.on('unhandledRejection', onUnhandled);
      try {
        const inbox = new MemoryInbox();
        Object.assign(inbox, { lease: () => Promise.resolve(handedOut) });
        const { ipn, of, durable } = setup({}, inbox); // its recovery at start leases at once
        ipn.on('successful', () => {});
        await until(() => of('error').length === 1, 'the recovery at start reported');
        expect(await durable.drain(Number.POSITIVE_INFINITY)).toMatchObject({ delivered: 0, left: 1 });
        await new Promise((resolve) => setImmediate(resolve));
        await new Promise((resolve) => setImmediate(resolve));
        expect(unhandled).toEqual([]);
        expect(of('error').map((event) => event.error.message)).toEqual([
          expect.stringMatching(
            /the store failed to hand out undelivered notifications: .*not a list of entries/,
          ),
          expect.stringMatching(
            /the store failed to hand out undelivered notifications: .*not a list of entries/,
          ),
        ]);
      } finally {
        process.off('unhandledRejection', onUnhandled);
      }
    },
  );

  test('once the context is closed, no retry and no recovery round runs', async () => {
    const { ipn, inbox, durable, received, context } = setup();
    const n = uniqueNotification();
    let calls = 0;
    ipn.on('successful', () => {
      calls += 1;
      throw new Error('ledger down');
    });
    const { key, leaseId } = await received(n);
    await durable.deliver(key, n, leaseId, 1);
    context.close();
    await jest.advanceTimersByTimeAsync(60 * 60_000);
    durable.recover();
    await settle();
    expect(calls).toBe(1);
    expect(inbox.entries.get(key)?.status).toBe('failed');
  });
});
