import { createReconcileSweep, MIN_QUERY_SPACING_MS } from '../../../lib/delivery/reconcile-sweep.js';
import type { Options } from '../../../lib/config/options.js';
import type { IpnNotification } from '../../../lib/notification/schema.js';
import { StatusRateLimitError, TransactionNotFoundError } from '../../../lib/shared/errors.js';
import type { Expectation } from '../../../lib/stores/expectation-store.js';
import { MemoryExpectations } from '../../../lib/stores/memory/memory-expectations.js';
import type { StatusSource } from '../../../lib/status/verify-notification.js';
import { deliveryHarness, uniqueNotification } from '../../helpers/delivery-context.js';
import { isSettled } from '../../../lib/delivery/expectations.js';

/** Forgotten by the sweep: kept as settled for `ttlMs`, so that a late copy is still checked against it. */
const retired = (e: Expectation | undefined): boolean => e !== undefined && isSettled(e);

const NOW = Date.parse('2026-01-01T00:00:00Z');

beforeEach(() => {
  jest.useFakeTimers({ now: NOW });
});
afterEach(() => {
  jest.useRealTimers();
});

type Getter = StatusSource['getStatus'];

function setup(getStatus: Getter | undefined, options: Partial<Options> = {}) {
  const harness = deliveryHarness({ reconcileAttempts: 2, ...options });
  const expectations = new MemoryExpectations(1_000, () => Date.now());
  const source = getStatus && { getStatus: jest.fn(getStatus) };
  const delivered: IpnNotification[] = [];
  const deliver = jest.fn((record: IpnNotification) => {
    delivered.push(record);
    return Promise.resolve(true);
  });
  const sweeper = createReconcileSweep(harness.context, expectations, source, deliver);
  /** An expectation due now, as `ipn.expect()` and `reconcileAfterMs` leave it. */
  const expect_ = (n: IpnNotification, fields: Partial<Expectation> = {}): void =>
    expectations.put({
      transactionId: n.transaction_id,
      customData: n.custom_data,
      amount: n.amount ?? undefined,
      expectedAt: NOW - 60_000,
      dueAt: NOW,
      attempts: 0,
      ...fields,
    });
  return { ...harness, expectations, source, deliver, delivered, sweeper, expect: expect_ };
}

const counts = { queried: 0, reconciled: 0, rejected: 0, stale: 0, swept: true };

describe('createReconcileSweep', () => {
  test('a due expectation whose record is SUCCESSFUL is delivered from that record and forgotten', async () => {
    const n = uniqueNotification();
    const { sweeper, expect: expecting, delivered, expectations } = setup(() => Promise.resolve(n));
    expecting(n);
    await expect(sweeper.sweep()).resolves.toEqual({ ...counts, queried: 1, reconciled: 1 });
    expect(delivered).toEqual([n]);
    expect(retired(expectations.get(n.transaction_id))).toBe(true);
  });

  test('an expectation not due yet is not asked about', async () => {
    const n = uniqueNotification();
    const { sweeper, expect: expecting, source } = setup(() => Promise.resolve(n));
    expecting(n, { dueAt: NOW + 1 });
    await expect(sweeper.sweep()).resolves.toEqual(counts);
    expect(source!.getStatus).not.toHaveBeenCalled();
  });

  test('a record that was delivered but not emitted (a duplicate) is not counted as reconciled', async () => {
    const n = uniqueNotification();
    const { sweeper, expect: expecting, deliver } = setup(() => Promise.resolve(n));
    deliver.mockResolvedValueOnce(false);
    expecting(n);
    await expect(sweeper.sweep()).resolves.toEqual({ ...counts, queried: 1 });
  });

  test('without a status client, a due expectation is reported stale (no_status_client) and forgotten', async () => {
    const n = uniqueNotification();
    const { sweeper, expect: expecting, of, expectations } = setup(undefined);
    expecting(n);
    await expect(sweeper.sweep()).resolves.toEqual({ ...counts, stale: 1 });
    expect(of('stale')).toEqual([
      expect.objectContaining({ transactionId: n.transaction_id, reason: 'no_status_client', attempts: 1 }),
    ]);
    expect(retired(expectations.get(n.transaction_id))).toBe(true);
  });

  test('a transaction the service does not know is asked again later, then reported stale (not_found)', async () => {
    const n = uniqueNotification();
    const {
      sweeper,
      expect: expecting,
      of,
      expectations,
    } = setup(() => Promise.reject(new TransactionNotFoundError(n.transaction_id)));
    expecting(n);
    await expect(sweeper.sweep()).resolves.toEqual({ ...counts, queried: 1 });
    expect(expectations.get(n.transaction_id)).toMatchObject({
      attempts: 1,
      dueAt: NOW + MIN_QUERY_SPACING_MS, // never closer than the service's 15 minutes
    });
    expect(of('stale')).toEqual([]);

    jest.setSystemTime(NOW + MIN_QUERY_SPACING_MS);
    await expect(sweeper.sweep()).resolves.toEqual({ ...counts, queried: 1, stale: 1 });
    expect(of('stale')).toEqual([expect.objectContaining({ reason: 'not_found', attempts: 2 })]);
    expect(retired(expectations.get(n.transaction_id))).toBe(true);
  });

  test('a service unavailable at the last attempt is reported stale (unavailable)', async () => {
    const n = uniqueNotification();
    const { sweeper, expect: expecting, of } = setup(() => Promise.reject(new Error('ECONNREFUSED')));
    expecting(n, { attempts: 1 });
    await sweeper.sweep();
    expect(of('stale')).toEqual([expect.objectContaining({ reason: 'unavailable' })]);
  });

  test('a state still pending at the last attempt is reported stale (not_final) with the record', async () => {
    const n = uniqueNotification();
    const pending = { ...n, state: 'PENDING' };
    const { sweeper, expect: expecting, of, delivered } = setup(() => Promise.resolve(pending));
    expecting(n, { attempts: 1 });
    await expect(sweeper.sweep()).resolves.toEqual({ ...counts, queried: 1, stale: 1 });
    expect(of('stale')).toEqual([expect.objectContaining({ reason: 'not_final', status: pending })]);
    expect(delivered).toEqual([]);
  });

  test('a record contradicting the expected amount is rejected, not delivered, and the expectation forgotten', async () => {
    const n = uniqueNotification();
    const {
      sweeper,
      expect: expecting,
      of,
      delivered,
      expectations,
    } = setup(() => Promise.resolve({ ...n, amount: 1 }));
    expecting(n, { amount: 5_000 });
    await expect(sweeper.sweep()).resolves.toEqual({ ...counts, queried: 1, rejected: 1 });
    expect(of('rejected')).toEqual([expect.objectContaining({ reason: 'mismatch', mismatches: ['amount'] })]);
    expect(delivered).toEqual([]);
    expect(retired(expectations.get(n.transaction_id))).toBe(true);
  });

  test('a FAILED record is delivered and its expectation kept, until the last attempt forgets it', async () => {
    const n = uniqueNotification({ state: 'FAILED' });
    const { sweeper, expect: expecting, delivered, expectations, said } = setup(() => Promise.resolve(n));
    expecting(n);
    await sweeper.sweep();
    expect(delivered).toEqual([n]);
    expect(expectations.get(n.transaction_id)).toMatchObject({ attempts: 1 });

    jest.setSystemTime(NOW + MIN_QUERY_SPACING_MS);
    await sweeper.sweep();
    expect(retired(expectations.get(n.transaction_id))).toBe(true);
    expect(said('info').map((line) => line.message)).toContain(
      'expected transaction still FAILED after 2 status queries: its expectation is forgotten',
    );
  });

  test('a rate limit is not an attempt: the expectation waits retryAfterMs and the pass stops there', async () => {
    const [a, b] = [uniqueNotification(), uniqueNotification()];
    const {
      sweeper,
      expect: expecting,
      source,
      expectations,
    } = setup((id) => Promise.reject(new StatusRateLimitError(id, 'budget', 30_000)));
    expecting(a);
    expecting(b);
    await expect(sweeper.sweep()).resolves.toEqual(counts);
    expect(source!.getStatus).toHaveBeenCalledTimes(1); // b is not asked about in this pass
    // Its wait rounded up, and a margin (25 ms) so that the next query is not refused again.
    expect(expectations.get(a.transaction_id)).toMatchObject({ attempts: 0, dueAt: NOW + 30_025 });
  });

  test.each([
    ['NaN', Number.NaN, 1_000],
    ['Infinity', Number.POSITIVE_INFINITY, 1_000],
    ['negative', -5, 1_000],
    ['over a day', 10 * 24 * 60 * 60_000, 24 * 60 * 60_000],
  ])(
    "a custom source's rate limit with retryAfterMs %s puts the expectation back at a valid time",
    async (_, retryAfterMs, wait) => {
      const n = uniqueNotification();
      const {
        sweeper,
        expect: expecting,
        expectations,
      } = setup((id) => Promise.reject(new StatusRateLimitError(id, 'budget', retryAfterMs)));
      expecting(n);
      await sweeper.sweep();
      expect(expectations.get(n.transaction_id)).toMatchObject({ attempts: 0, dueAt: NOW + wait });
    },
  );

  test('more due expectations than one batch (20) are all settled in one pass', async () => {
    const all = Array.from({ length: 45 }, () => uniqueNotification());
    const byId = new Map(all.map((n) => [n.transaction_id, n]));
    const { sweeper, expect: expecting } = setup((id) => Promise.resolve(byId.get(id)!));
    for (const n of all) expecting(n);
    await expect(sweeper.sweep()).resolves.toEqual({ ...counts, queried: 45, reconciled: 45 });
  });

  test('while another instance holds the lock, a sweep does nothing', async () => {
    const n = uniqueNotification();
    const { sweeper, expect: expecting, expectations, source } = setup(() => Promise.resolve(n));
    expecting(n);
    expect(expectations.lockSweep('another-instance', 60_000)).toBe(true);
    await expect(sweeper.sweep()).resolves.toEqual({ ...counts, swept: false });
    expect(source!.getStatus).not.toHaveBeenCalled();
  });

  test('two sweeps at once share one pass, and the lock is let go after it', async () => {
    const n = uniqueNotification();
    const { sweeper, expect: expecting, expectations, source } = setup(() => Promise.resolve(n));
    expecting(n);
    const [first, second] = await Promise.all([sweeper.sweep(), sweeper.sweep()]);
    expect(first).toBe(second);
    expect(source!.getStatus).toHaveBeenCalledTimes(1);
    expect(expectations.lockSweep('another-instance', 60_000)).toBe(true);
  });

  test('a store failure on one expectation is reported; the others are still settled', async () => {
    const [a, b] = [uniqueNotification(), uniqueNotification()];
    const byId = new Map([a, b].map((n) => [n.transaction_id, n]));
    const {
      sweeper,
      expect: expecting,
      expectations,
      of,
      delivered,
    } = setup((id) => Promise.resolve(byId.get(id)!));
    expecting(a);
    expecting(b);
    const put = expectations.put.bind(expectations);
    jest.spyOn(expectations, 'put').mockImplementation((e) => {
      if (e.transactionId === a.transaction_id) throw new Error('connection reset');
      put(e);
    });
    await sweeper.sweep();
    expect(of('error').map((e) => e.error.message)).toEqual([
      `the sweep failed for ${a.transaction_id}: connection reset`,
    ]);
    expect(delivered).toEqual([a, b]);
    expect(retired(expectations.get(b.transaction_id))).toBe(true);
  });

  test('a settled expectation is deleted once its ttlMs is over, with no status query', async () => {
    const n = uniqueNotification();
    const {
      sweeper,
      expect: expecting,
      expectations,
      source,
      delivered,
    } = setup(() => Promise.resolve(n), {
      ttlMs: 60_000,
    });
    expecting(n);
    await sweeper.sweep();
    expect(retired(expectations.get(n.transaction_id))).toBe(true);
    expect(source?.getStatus).toHaveBeenCalledTimes(1);
    jest.setSystemTime(NOW + 59_000);
    await sweeper.sweep();
    expect(retired(expectations.get(n.transaction_id))).toBe(true);
    jest.setSystemTime(NOW + 60_000);
    await sweeper.sweep();
    expect(expectations.get(n.transaction_id)).toBeUndefined();
    expect(source?.getStatus).toHaveBeenCalledTimes(1);
    expect(delivered).toEqual([n]);
  });

  test('a lock the store fails to take is an error event, and the sweep resolves having done nothing', async () => {
    const { sweeper, expectations, of } = setup(() => Promise.reject(new Error('unused')));
    jest.spyOn(expectations, 'lockSweep').mockImplementation(() => {
      throw new Error('connection reset');
    });
    await expect(sweeper.sweep()).resolves.toEqual({ ...counts, swept: false });
    expect(of('error')[0].error.message).toBe('the reconciliation sweep failed: connection reset');
  });

  test('once the router is closed, a pass stops before the next expectation', async () => {
    const [a, b] = [uniqueNotification(), uniqueNotification()];
    const {
      sweeper,
      expect: expecting,
      context,
      source,
    } = setup((id) => {
      context.close(); // closed while the first query is under way
      return Promise.resolve(id === a.transaction_id ? a : b);
    });
    expecting(a);
    expecting(b);
    await sweeper.sweep();
    expect(source!.getStatus).toHaveBeenCalledTimes(1);
  });

  test('start() sweeps every sweepIntervalMs, and only the first call starts it', async () => {
    const { sweeper } = setup(undefined, { sweepIntervalMs: 10_000 });
    const run = jest.fn();
    sweeper.start(run);
    sweeper.start(run);
    await jest.advanceTimersByTimeAsync(30_000);
    expect(run).toHaveBeenCalledTimes(3);
  });
});
