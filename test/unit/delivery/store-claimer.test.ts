import { createStoreClaimer } from '../../../lib/delivery/store-claimer.js';
import { StoreError } from '../../../lib/shared/errors.js';
import { MemoryStore } from '../../../lib/stores/memory/memory-store.js';
import type { Store } from '../../../lib/stores/store.js';

const TTL = 60_000;
const TIMEOUT = 1_000;

beforeEach(() => {
  jest.useFakeTimers();
});
afterEach(() => {
  jest.useRealTimers();
});

/** A store whose claim answers are given by the test, one promise per call. */
function controlledStore(init?: () => Promise<void>) {
  const calls: Array<{
    key: string;
    token: string;
    answer: (claimed: unknown) => void;
    fail: (error: unknown) => void;
  }> = [];
  const store: Store = {
    claim: (key, _ttl, token) =>
      new Promise<boolean>((resolve, reject) => {
        calls.push({ key, token: String(token), answer: resolve as (c: unknown) => void, fail: reject });
      }),
    release: () => {},
    ...(init ? { init } : {}),
  };
  return { store, calls };
}

describe('createStoreClaimer', () => {
  test('a synchronous store answers at once: true for the first claim of a key, false for its resend', async () => {
    const claimer = createStoreClaimer(new MemoryStore(), TTL, TIMEOUT);
    await expect(claimer.claim('EFB.1:SUCCESSFUL', () => {})).resolves.toBe(true);
    await expect(claimer.claim('EFB.1:SUCCESSFUL', () => {})).resolves.toBe(false);
    expect(jest.getTimerCount()).toBe(0); // no timer for an answer that came at once
  });

  test('a claim the store does not answer within timeoutMs is a StoreError; answered true later, it is delivered late', async () => {
    const { store, calls } = controlledStore();
    const claimer = createStoreClaimer(store, TTL, TIMEOUT);
    const late = jest.fn();
    const claim = claimer.claim('EFB.2:SUCCESSFUL', late);
    await jest.advanceTimersByTimeAsync(TIMEOUT);
    const answer = await claim;
    expect(answer).toBeInstanceOf(StoreError);
    expect((answer as StoreError).message).toBe(
      `the store failed to claim EFB.2:SUCCESSFUL: no answer within ${TIMEOUT} ms`,
    );
    expect(late).not.toHaveBeenCalled();
    calls[0]!.answer(true);
    await jest.advanceTimersByTimeAsync(0);
    expect(late).toHaveBeenCalledTimes(1);
  });

  test('a claim still running past its answer is tracked until it lands, its late delivery started by then; one in time is not', async () => {
    const { store, calls } = controlledStore();
    const claimer = createStoreClaimer(store, TTL, TIMEOUT);
    const tracked: Array<Promise<unknown>> = [];
    claimer.track((pending) => tracked.push(pending));
    const inTime = claimer.claim('EFB.9:SUCCESSFUL', () => {});
    calls[0]!.answer(true);
    await expect(inTime).resolves.toBe(true);
    expect(tracked).toHaveLength(0); // no write per claim on the hot path
    const late = jest.fn();
    const claim = claimer.claim('EFB.10:SUCCESSFUL', late);
    await jest.advanceTimersByTimeAsync(TIMEOUT);
    await claim;
    expect(tracked).toHaveLength(1);
    let landed = false;
    void tracked[0]!.then(() => (landed = true));
    await jest.advanceTimersByTimeAsync(0);
    expect(landed).toBe(false);
    calls[1]!.answer(true);
    await jest.advanceTimersByTimeAsync(0);
    expect(landed).toBe(true);
    expect(late).toHaveBeenCalledTimes(1);
  });

  test('a claim that times out and is answered false later (another caller had it) delivers nothing', async () => {
    const { store, calls } = controlledStore();
    const claimer = createStoreClaimer(store, TTL, TIMEOUT);
    const late = jest.fn();
    const claim = claimer.claim('EFB.3:SUCCESSFUL', late);
    await jest.advanceTimersByTimeAsync(TIMEOUT);
    await claim;
    calls[0]!.answer(false);
    await jest.advanceTimersByTimeAsync(0);
    expect(late).not.toHaveBeenCalled();
  });

  test("a claim answered with anything but a boolean (Redis's 'OK') is a store failure, never a resend", async () => {
    const { store, calls } = controlledStore();
    const claimer = createStoreClaimer(store, TTL, TIMEOUT);
    const claim = claimer.claim('EFB.4:SUCCESSFUL', () => {});
    calls[0]!.answer('OK');
    const answer = await claim;
    expect(answer).toBeInstanceOf(StoreError);
    expect((answer as StoreError).message).toMatch(/store\.claim must return true or false .*got OK/);
  });

  test('a claim whose answer was lost is asked again with the same token, and delivered when it was ours', async () => {
    const { store, calls } = controlledStore();
    const claimer = createStoreClaimer(store, TTL, TIMEOUT);
    const late = jest.fn();
    const claim = claimer.claim('EFB.5:SUCCESSFUL', late);
    calls[0]!.fail(new Error('connection reset'));
    expect(await claim).toBeInstanceOf(StoreError);

    await jest.advanceTimersByTimeAsync(500); // the first wait
    expect(calls).toHaveLength(2);
    expect(calls[1]!.token).toBe(calls[0]!.token);
    calls[1]!.fail(new Error('still down'));
    await jest.advanceTimersByTimeAsync(999);
    expect(calls).toHaveLength(2); // the second wait is twice as long
    await jest.advanceTimersByTimeAsync(1);
    expect(calls).toHaveLength(3);
    calls[2]!.answer(true);
    await jest.advanceTimersByTimeAsync(0);
    expect(late).toHaveBeenCalledTimes(1);
  });

  test('a lost answer is asked again at most six times', async () => {
    const { store, calls } = controlledStore();
    const claimer = createStoreClaimer(store, TTL, TIMEOUT);
    const claim = claimer.claim('EFB.6:SUCCESSFUL', () => {});
    calls[0]!.fail(new Error('connection reset'));
    await claim;
    for (let asked = 1; asked <= 8; asked += 1) {
      await jest.advanceTimersByTimeAsync(500 * 2 ** 8);
      calls[calls.length - 1]!.fail(new Error('still down'));
    }
    await jest.advanceTimersByTimeAsync(500 * 2 ** 8);
    expect(calls).toHaveLength(7);
  });

  test('close() stops asking again for lost answers', async () => {
    const { store, calls } = controlledStore();
    const claimer = createStoreClaimer(store, TTL, TIMEOUT);
    const claim = claimer.claim('EFB.7:SUCCESSFUL', () => {});
    calls[0]!.fail(new Error('connection reset'));
    await claim;
    claimer.close();
    await jest.advanceTimersByTimeAsync(60_000);
    expect(calls).toHaveLength(1);
    expect(jest.getTimerCount()).toBe(0);
  });

  test('close() asks a lost answer still waiting for its timer a last time at once: ours, it is released, not delivered', async () => {
    const { store, calls } = controlledStore();
    const claimer = createStoreClaimer(store, TTL, TIMEOUT);
    const tracked: Array<Promise<unknown>> = [];
    claimer.track((pending) => tracked.push(pending));
    const late = jest.fn();
    const claim = claimer.claim('EFB.12:SUCCESSFUL', late);
    calls[0]!.fail(new Error('connection reset'));
    await claim;
    const release = jest.fn();
    const unanswered = jest.fn();
    claimer.close({ release, unanswered });
    expect(jest.getTimerCount()).toBe(0);
    await jest.advanceTimersByTimeAsync(0);
    expect(calls).toHaveLength(2); // asked now, not after its wait
    expect(calls[1]!.token).toBe(calls[0]!.token);
    expect(tracked).toHaveLength(1); // close() waits for it
    calls[1]!.answer(true);
    await jest.advanceTimersByTimeAsync(60_000);
    expect(release).toHaveBeenCalledWith('EFB.12:SUCCESSFUL');
    expect(late).not.toHaveBeenCalled();
    expect(unanswered).not.toHaveBeenCalled();
    expect(calls).toHaveLength(2);
  });

  test("close(): a lost answer asked a last time that is another's is left alone; one still unanswered is reported", async () => {
    const { store, calls } = controlledStore();
    const claimer = createStoreClaimer(store, TTL, TIMEOUT);
    for (const key of ['EFB.13:SUCCESSFUL', 'EFB.14:SUCCESSFUL']) {
      const claim = claimer.claim(key, () => {});
      calls[calls.length - 1]!.fail(new Error('connection reset'));
      await claim;
    }
    const release = jest.fn();
    const unanswered = jest.fn();
    claimer.close({ release, unanswered });
    await jest.advanceTimersByTimeAsync(0);
    expect(calls.slice(2).map((call) => call.key)).toEqual(['EFB.13:SUCCESSFUL', 'EFB.14:SUCCESSFUL']);
    calls[2]!.answer(false);
    calls[3]!.fail(new Error('still down'));
    await jest.advanceTimersByTimeAsync(60_000);
    expect(release).not.toHaveBeenCalled();
    expect(unanswered).toHaveBeenCalledTimes(1);
    expect(unanswered.mock.calls[0]![0]).toBe('EFB.14:SUCCESSFUL');
    expect(calls).toHaveLength(4); // never asked again
  });

  test('a durable receive is never asked again: the stored entry is taken up by recovery', async () => {
    const { store } = controlledStore();
    const claimer = createStoreClaimer(store, TTL, TIMEOUT);
    const receive = jest.fn(() => Promise.reject(new Error('connection reset')));
    expect(await claimer.claim('EFB.8:SUCCESSFUL', () => {}, receive)).toBeInstanceOf(StoreError);
    await jest.advanceTimersByTimeAsync(60_000);
    expect(receive).toHaveBeenCalledTimes(1);
  });

  test('init runs once before the first claim, and the claims wait for it', async () => {
    let ready: (() => void) | undefined;
    const init = jest.fn(() => new Promise<void>((resolve) => (ready = resolve)));
    const { store, calls } = controlledStore(init);
    const claimer = createStoreClaimer(store, TTL, TIMEOUT);
    const first = claimer.claim('EFB.9:SUCCESSFUL', () => {});
    const second = claimer.claim('EFB.10:SUCCESSFUL', () => {});
    await jest.advanceTimersByTimeAsync(0);
    expect(init).toHaveBeenCalledTimes(1);
    expect(calls).toHaveLength(0);
    ready!();
    await jest.advanceTimersByTimeAsync(0);
    expect(calls.map((call) => call.key)).toEqual(['EFB.9:SUCCESSFUL', 'EFB.10:SUCCESSFUL']);
    calls[0]!.answer(true);
    calls[1]!.answer(true);
    await expect(Promise.all([first, second])).resolves.toEqual([true, true]);
  });

  test('an init that fails is a StoreError, and the next claim tries init again', async () => {
    const init = jest
      .fn<Promise<void>, []>()
      .mockRejectedValueOnce(new Error('relation does not exist'))
      .mockResolvedValue();
    const { store, calls } = controlledStore(init);
    const claimer = createStoreClaimer(store, TTL, TIMEOUT);
    const failed = await claimer.claim('EFB.11:SUCCESSFUL', () => {});
    expect(failed).toBeInstanceOf(StoreError);
    expect((failed as StoreError).message).toMatch(/relation does not exist/);
    expect(calls).toHaveLength(0);

    const claim = claimer.claim('EFB.11:SUCCESSFUL', () => {});
    await jest.advanceTimersByTimeAsync(0);
    calls[0]!.answer(true);
    await expect(claim).resolves.toBe(true);
    expect(init).toHaveBeenCalledTimes(2);
  });

  test('an init that hangs is bounded per claim by timeoutMs, and not started twice', async () => {
    const init = jest.fn(() => new Promise<void>(() => {}));
    const { store } = controlledStore(init);
    const claimer = createStoreClaimer(store, TTL, TIMEOUT);
    const first = claimer.claim('EFB.12:SUCCESSFUL', () => {});
    await jest.advanceTimersByTimeAsync(TIMEOUT);
    expect(await first).toBeInstanceOf(StoreError);
    const second = claimer.claim('EFB.12:SUCCESSFUL', () => {});
    await jest.advanceTimersByTimeAsync(TIMEOUT);
    expect(await second).toBeInstanceOf(StoreError);
    expect(init).toHaveBeenCalledTimes(1);
  });

  test('a late callback that throws reaches no one: no unhandled rejection', async () => {
    const { store, calls } = controlledStore();
    const claimer = createStoreClaimer(store, TTL, TIMEOUT);
    const late = jest.fn(() => {
      throw new Error('a bug in the caller');
    });
    const claim = claimer.claim('EFB.13:SUCCESSFUL', late);
    await jest.advanceTimersByTimeAsync(TIMEOUT);
    await claim;
    const unhandled = jest.fn();
    process.on('unhandledRejection', unhandled);
    try {
      calls[0]!.answer(true);
      await jest.advanceTimersByTimeAsync(0);
      expect(late).toHaveBeenCalledTimes(1);
      expect(unhandled).not.toHaveBeenCalled();
    } finally {
      process.off('unhandledRejection', unhandled);
    }
  });
});
