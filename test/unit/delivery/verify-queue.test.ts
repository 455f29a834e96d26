import { createVerifyQueue } from '../../../lib/delivery/verify-queue.js';
import { createLifecycle } from '../../../lib/delivery/lifecycle.js';
import { keyOf } from '../../../lib/delivery/delivery-context.js';
import type { Options } from '../../../lib/config/options.js';
import type { IpnNotification } from '../../../lib/notification/schema.js';
import {
  StatusRateLimitError,
  TransactionNotFoundError,
  VerificationError,
} from '../../../lib/shared/errors.js';
import { MemoryStore } from '../../../lib/stores/memory/memory-store.js';
import type { StatusSource } from '../../../lib/status/verify-notification.js';
import { deliveryHarness, uniqueNotification } from '../../helpers/delivery-context.js';

beforeEach(() => {
  jest.useFakeTimers();
});
afterEach(() => {
  jest.useRealTimers();
});

/** Lets every promise chain started by now run, on the fake clock. */
async function settle(): Promise<void> {
  for (let turn = 0; turn < 20; turn += 1) await jest.advanceTimersByTimeAsync(0);
}

function setup(getStatus: StatusSource['getStatus'], options: Partial<Options> = {}) {
  const store = new MemoryStore();
  const release = jest.spyOn(store, 'release');
  const source = { getStatus: jest.fn(getStatus) };
  const harness = deliveryHarness({
    store,
    verify: source,
    verifyAttempts: 3,
    verifyRetryDelayMs: 1_000,
    maxPendingVerifications: 2,
    ...options,
  });
  const queue = createVerifyQueue(harness.context, source, createLifecycle(harness.context, undefined));
  const credited: IpnNotification[] = [];
  harness.ipn.on('successful', (n) => void credited.push(n));
  /** Starts verifying `n` as the router does: a place reserved, then the claim made. */
  const accept = (n: IpnNotification): Promise<void> => {
    expect(queue.reserve(keyOf(n))).toBe(true);
    return queue.start(n);
  };
  return { ...harness, queue, source, release, credited, accept };
}

const unreachable = (): Promise<never> => Promise.reject(new Error('ECONNREFUSED'));

describe('createVerifyQueue', () => {
  test('a notification the service confirms is emitted once, after one status query', async () => {
    const n = uniqueNotification();
    const { accept, credited, source, queue } = setup(() => Promise.resolve(n));
    await accept(n);
    expect(credited).toEqual([n]);
    expect(source.getStatus).toHaveBeenCalledTimes(1);
    expect(queue.size()).toBe(0);
  });

  test('beyond maxPendingVerifications reserve refuses; unreserve and start give the places back', () => {
    const { queue } = setup(() => new Promise<never>(() => {}));
    const [a, b] = [uniqueNotification(), uniqueNotification()];
    expect(queue.reserve(keyOf(a))).toBe(true);
    expect(queue.reserve(keyOf(b))).toBe(true);
    expect(queue.reserve('EFB.third:SUCCESSFUL')).toBe(false);
    queue.unreserve(keyOf(b));
    expect(queue.size()).toBe(1);
    void queue.start(a); // its reservation becomes a verification: still one place taken
    expect(queue.size()).toBe(1);
    expect(queue.reserve(keyOf(b))).toBe(true);
    expect(queue.reserve('EFB.third:SUCCESSFUL')).toBe(false);
  });

  test('unreserving a key never reserved changes nothing', () => {
    const { queue } = setup(unreachable);
    queue.unreserve('EFB.never:SUCCESSFUL');
    expect(queue.size()).toBe(0);
  });

  test('a service that cannot answer is asked again with backoff, then the notification is reported and released', async () => {
    const n = uniqueNotification();
    const { accept, source, of, release, credited } = setup(unreachable);
    await accept(n);
    expect(source.getStatus).toHaveBeenCalledTimes(1);
    await jest.advanceTimersByTimeAsync(1_000);
    expect(source.getStatus).toHaveBeenCalledTimes(2);
    await jest.advanceTimersByTimeAsync(1_999);
    expect(source.getStatus).toHaveBeenCalledTimes(2); // the second wait is twice as long
    await jest.advanceTimersByTimeAsync(1);
    await settle();
    expect(source.getStatus).toHaveBeenCalledTimes(3);
    expect(credited).toEqual([]);
    expect(release).toHaveBeenCalledWith(keyOf(n));
    expect(of('error')).toHaveLength(1);
    expect(of('error')[0].error).toBeInstanceOf(VerificationError);
    expect(of('error')[0].notification).toEqual(n);
  });

  // Rounded up, plus a margin (25 ms): the guard's clock and the retry's are not the same to the millisecond.
  test("a rate limit's retryAfterMs is waited for when longer than the backoff", async () => {
    const n = uniqueNotification();
    const { accept, source } = setup(() =>
      Promise.reject(new StatusRateLimitError(n.transaction_id, 'budget', 4_999.4)),
    );
    await accept(n);
    await jest.advanceTimersByTimeAsync(5_024);
    expect(source.getStatus).toHaveBeenCalledTimes(1);
    await jest.advanceTimersByTimeAsync(1);
    expect(source.getStatus).toHaveBeenCalledTimes(2);
  });

  // A custom source's refusal that says NaN, Infinity or a negative wait: the usual backoff (a NaN or an
  // Infinity was a timer that fired at once); a huge one: a day, the longest the status client itself obeys.
  for (const [said, waited] of [
    [Number.NaN, 1_000],
    [Number.POSITIVE_INFINITY, 1_000],
    [-5, 1_000],
    [1e300, 24 * 60 * 60_000],
  ] as const) {
    test(`a rate limit's retryAfterMs of ${said} is waited for as ${waited} ms`, async () => {
      const n = uniqueNotification();
      let asked = 0;
      const { accept, source, credited } = setup(() =>
        (asked += 1) === 1
          ? Promise.reject(new StatusRateLimitError(n.transaction_id, 'budget', said))
          : Promise.resolve(n),
      );
      await accept(n);
      await jest.advanceTimersByTimeAsync(waited - 1);
      expect(source.getStatus).toHaveBeenCalledTimes(1);
      await jest.advanceTimersByTimeAsync(1);
      await settle();
      expect(source.getStatus).toHaveBeenCalledTimes(2);
      expect(credited).toEqual([n]);
    });
  }

  test('a transaction the service does not know, twice, is rejected as not_found and its key released', async () => {
    const n = uniqueNotification();
    const { accept, of, release, credited } = setup(() =>
      Promise.reject(new TransactionNotFoundError(n.transaction_id)),
    );
    await accept(n);
    expect(of('rejected')).toEqual([]); // the first not-found waits for a second one
    await jest.advanceTimersByTimeAsync(1_000);
    await settle();
    expect(of('rejected')).toEqual([expect.objectContaining({ reason: 'not_found', notification: n })]);
    expect(release).toHaveBeenCalledWith(keyOf(n));
    expect(credited).toEqual([]);
  });

  test("a forged custom_data of a real payment: rejected, and the service's own record is delivered instead", async () => {
    const genuine = uniqueNotification({ custom_data: '{"orderId":"the-real-order"}' });
    const forged = { ...genuine, custom_data: '{"orderId":"the-forger-order"}' };
    const { accept, of, credited, release, said } = setup(() => Promise.resolve(genuine));
    await accept(forged);
    expect(of('rejected')).toEqual([
      expect.objectContaining({ reason: 'mismatch', mismatches: ['custom_data'] }),
    ]);
    expect(credited.map((n) => n.custom_data)).toEqual([genuine.custom_data]);
    expect(release).not.toHaveBeenCalled();
    expect(said('warn').map((line) => line.message)).toContain('delivered the service record instead');
  });

  test('a verified notification whose lifecycle the store fails to decide is decided again, never emitted undecided nor verified twice', async () => {
    const store = new MemoryStore();
    const decide = jest
      .spyOn(store.lifecycle, 'decide')
      .mockImplementationOnce(() => {
        throw new Error('connection reset');
      })
      .mockImplementationOnce(() => Promise.reject(new Error('connection reset')) as never);
    const n = uniqueNotification();
    const { accept, source, credited, of, release } = setup(() => Promise.resolve(n), { store });
    await accept(n);
    expect(credited).toEqual([]);
    await jest.advanceTimersByTimeAsync(1_000);
    await settle();
    expect(credited).toEqual([]);
    await jest.advanceTimersByTimeAsync(2_000);
    await settle();
    expect(credited).toEqual([n]);
    expect(decide).toHaveBeenCalledTimes(3);
    expect(source.getStatus).toHaveBeenCalledTimes(1);
    expect(of('error')).toEqual([]);
    expect(release).not.toHaveBeenCalled();
  });

  test('a lifecycle the store never decides within verifyAttempts: the StoreError reported, the key released, nothing emitted', async () => {
    const store = new MemoryStore();
    jest
      .spyOn(store.lifecycle, 'decide')
      .mockImplementation(() => Promise.reject(new Error('down')) as never);
    const n = uniqueNotification();
    const { accept, credited, of } = setup(() => Promise.resolve(n), { store });
    const release = jest.spyOn(store, 'release');
    await accept(n);
    await jest.advanceTimersByTimeAsync(3_000);
    await settle();
    expect(credited).toEqual([]);
    expect(of('error').map((e) => e.error.message)).toEqual([
      expect.stringMatching(/failed to decide the lifecycle of .*: down/),
    ]);
    expect(release).toHaveBeenCalledWith(keyOf(n));
  });

  test('a state the service still reports pending after verifyAttempts is rejected as not_final', async () => {
    const n = uniqueNotification();
    const { accept, of, credited } = setup(() => Promise.resolve({ ...n, state: 'PENDING' }));
    await accept(n);
    await jest.advanceTimersByTimeAsync(3_000);
    await settle();
    expect(of('rejected')).toEqual([expect.objectContaining({ reason: 'not_final', mismatches: ['state'] })]);
    expect(credited).toEqual([]);
  });

  test('a PENDING cached before the copy arrived never rejects it not_final: a newer one is asked for, and a refusal is reported', async () => {
    const n = uniqueNotification();
    // The client's cache holds a PENDING older than the copy (a forgery of its key's asked first): a call
    // that needs a newer one is refused, as the guard does within minIntervalMs.
    const { accept, of, source, credited } = setup((id, options) =>
      options?.since === undefined
        ? Promise.resolve({ ...n, state: 'PENDING' })
        : Promise.reject(new StatusRateLimitError(id, 'interval', 500)),
    );
    await accept(n);
    await jest.advanceTimersByTimeAsync(3_000);
    await settle();
    expect(source.getStatus).toHaveBeenCalledWith(
      n.transaction_id,
      expect.objectContaining({ since: expect.any(Number) }),
    );
    expect(of('rejected')).toEqual([]); // on main: not_final, on the cached PENDING
    expect(of('error')).toEqual([
      expect.objectContaining({ error: expect.any(VerificationError), notification: n }),
    ]);
    expect(credited).toEqual([]);
  });

  test('close() reports and releases every pending verification; its late answer emits nothing', async () => {
    const n = uniqueNotification();
    let answer: ((record: IpnNotification) => void) | undefined;
    const { accept, queue, context, of, release, credited } = setup(
      () => new Promise((resolve) => (answer = resolve)),
    );
    const started = accept(n);
    context.close();
    queue.close();
    await settle();
    expect(release).toHaveBeenCalledWith(keyOf(n));
    expect(of('error')[0].error.message).toMatch(/closed before it could verify/);
    answer!(n);
    await started;
    expect(credited).toEqual([]);
    expect(queue.size()).toBe(0);
  });

  test('a claim that lands after close is released and reported, never verified', async () => {
    const n = uniqueNotification();
    const { queue, context, source, of, release } = setup(unreachable);
    expect(queue.reserve(keyOf(n))).toBe(true);
    context.close();
    await queue.start(n);
    expect(source.getStatus).not.toHaveBeenCalled();
    expect(release).toHaveBeenCalledWith(keyOf(n));
    expect(of('error')).toHaveLength(1);
    expect(queue.size()).toBe(0);
  });
});

describe('createVerifyQueue: undecided (a refused claim of a key whose fate is not decided here)', () => {
  test('while another copy is being verified, or claimed about to be: undecided; once it is credited: a duplicate', async () => {
    let answer: (n: IpnNotification) => void = () => {};
    const n = uniqueNotification();
    const { queue, accept, credited } = setup(() => new Promise<IpnNotification>((r) => (answer = r)));
    const key = keyOf(n);
    // Claimed by another request, not started yet: this request's claim refused.
    expect(queue.reserve(key)).toBe(true);
    expect(queue.reserve(key)).toBe(true);
    expect(queue.undecided(key)).toBe(true);
    queue.unreserve(key);
    queue.unreserve(key);
    void accept(n); // the first copy, being verified
    expect(queue.reserve(key)).toBe(true);
    expect(queue.undecided(key)).toBe(true);
    queue.unreserve(key);
    answer(n);
    await settle();
    expect(credited).toEqual([n]);
    expect(queue.reserve(key)).toBe(true);
    expect(queue.undecided(key)).toBe(false); // credited: a plain duplicate
    queue.unreserve(key);
  });

  test('let go while a copy of its key was being claimed: that copy is undecided, even once the release landed', async () => {
    const n = uniqueNotification();
    const { queue, release } = setup(unreachable, { verifyAttempts: 1 });
    const key = keyOf(n);
    expect(queue.reserve(key)).toBe(true); // the first copy
    expect(queue.reserve(key)).toBe(true); // the second copy, its claim in flight
    // The first copy claimed, given up at once, its key released while the second copy's claim is in
    // flight: the store may have refused that claim before the release landed.
    await queue.start(n);
    await settle();
    expect(release).toHaveBeenCalledWith(key);
    expect(queue.undecided(key)).toBe(true);
    queue.unreserve(key); // the second request answered (503)
    expect(queue.reserve(key)).toBe(true); // a copy after that: a refused claim of it is a plain duplicate
    expect(queue.undecided(key)).toBe(false);
    queue.unreserve(key);
  });
});
