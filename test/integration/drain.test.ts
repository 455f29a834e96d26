import { ipnRouter, MemoryStore, StatusQueryError, type IpnRouter, type Options } from '../../lib/index.js';
import { ipnNotificationSchema } from '../../lib/notification/schema.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';

// ipn.drain(): one bounded pass of what the timers do, counted. On a fake clock that only moves when told
// (setSystemTime moves the wall clock without firing a timer), so that only drain() can do the work.
const T0 = Date.parse('2026-01-01T00:00:00Z');
beforeEach(() => {
  jest.useFakeTimers({ now: T0, doNotFake: ['nextTick', 'setImmediate', 'queueMicrotask'] });
});
afterEach(() => {
  jest.useRealTimers();
});

const routers: IpnRouter<any, any>[] = [];
afterEach(async () => {
  await Promise.all(routers.splice(0).map((ipn) => ipn.close()));
});

function router(options: Partial<Options>) {
  const ipn = ipnRouter({ logger: quiet, recoveryIntervalMs: 3_600_000, ...options });
  routers.push(ipn);
  return ipn;
}

/** POSTs `payment` through `ipn.fetch` and resolves once the work after the 200 (first attempt) settled. */
async function post(ipn: IpnRouter<any, any>, payment: Record<string, unknown>): Promise<number> {
  const after: Array<Promise<unknown>> = [];
  const response = await ipn.fetch(
    new Request('http://app.example/ipn', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(payment),
    }),
    { waitUntil: (work) => void after.push(work) },
  );
  await Promise.all(after);
  return response.status;
}

const later = (ms: number): void => jest.setSystemTime(Date.now() + ms);

describe('ipn.drain() at-least-once', () => {
  test('counts a retry made, a delivery, a dead entry and an expectation swept; leaves no timer', async () => {
    const ok = uniquePayload({ custom_data: 'fails-once' });
    const bad = uniquePayload({ custom_data: 'always-fails' });
    const expected = uniquePayload({ custom_data: 'never-notified' });
    const ipn = router({
      store: new MemoryStore(),
      delivery: 'at-least-once',
      maxAttempts: 3,
      retryDelayMs: 60_000,
      reconcileAfterMs: 60_000,
      statusClient: { getStatus: () => Promise.resolve(ipnNotificationSchema.parse(expected)) },
    });
    const recorder = recordEvents(ipn);
    ipn.on('successful', (n, { attempt }) => {
      if (n.custom_data === 'always-fails' || (n.custom_data === 'fails-once' && attempt === 1))
        throw new Error('the ledger is busy');
    });
    expect(await post(ipn, ok)).toBe(200);
    expect(await post(ipn, bad)).toBe(200);
    await ipn.expect(String(expected.transaction_id), { customData: 'never-notified' });
    const timers = jest.getTimerCount();

    // Nothing is due yet: the retries are a minute away, the expectation too.
    expect(await ipn.drain()).toEqual({ delivered: 0, retried: 0, dead: 0, swept: 0, left: 0 });

    later(61_000);
    expect(await ipn.drain()).toEqual({ delivered: 1, retried: 1, dead: 0, swept: 1, left: 0 });
    expect((await ipn.inbox.get(`${String(ok.transaction_id)}:SUCCESSFUL`))?.status).toBe('delivered');
    expect(await ipn.inbox.get(`${String(bad.transaction_id)}:SUCCESSFUL`)).toMatchObject({
      status: 'failed',
      attempts: 2,
    });
    // The expectation's record was delivered through the same dedupe, as a notification.
    expect(recorder.of('successful').map((n: { custom_data: string }) => n.custom_data)).toContain(
      'never-notified',
    );
    // The drain left no timer of its own: the pending ones are the router's (its retries and intervals).
    expect(jest.getTimerCount()).toBe(timers);

    later(2 * 60_000); // the third attempt's backoff (doubled)
    expect(await ipn.drain()).toEqual({ delivered: 0, retried: 0, dead: 1, swept: 0, left: 0 });
    expect(recorder.count('dead')).toBe(1);
    expect(jest.getTimerCount()).toBe(timers);
  });

  test('an expectation swept whose delivery fails is left to the next drain: the pass schedules no retry timer', async () => {
    const expected = uniquePayload({ custom_data: 'never-notified' });
    const ipn = router({
      store: new MemoryStore(),
      delivery: 'at-least-once',
      retryDelayMs: 60_000,
      reconcileAfterMs: 60_000,
      statusClient: { getStatus: () => Promise.resolve(ipnNotificationSchema.parse(expected)) },
    });
    let calls = 0;
    ipn.on('successful', () => {
      calls += 1;
      if (calls === 1) throw new Error('the ledger is busy');
    });
    await ipn.expect(String(expected.transaction_id), { customData: 'never-notified' });
    await jest.advanceTimersByTimeAsync(0); // the timers started by that first use settle
    const timers = jest.getTimerCount();
    later(61_000);
    await ipn.drain();
    expect(calls).toBe(1);
    expect(jest.getTimerCount()).toBe(timers); // its retry is the store's next-attempt time, not a timer
    later(61_000);
    expect(await ipn.drain()).toMatchObject({ delivered: 1 });
    expect(calls).toBe(2);
  });

  test('a second call while a pass runs joins it; each budget is a number >= 0', async () => {
    const ipn = router({ store: new MemoryStore(), delivery: 'at-least-once' });
    const first = ipn.drain({ budgetMs: 1_000 });
    expect(ipn.drain()).toBe(first);
    await first;
    expect(ipn.drain()).not.toBe(first); // a new pass once the first resolved
    expect(() => ipn.drain({ budgetMs: -1 })).toThrow(TypeError);
    expect(() => ipn.drain({ budgetMs: Number.NaN })).toThrow(/budgetMs/);
  });

  test('more due entries than a batch: a budget of 0 takes one batch (50) and says more may be left', async () => {
    let now = T0;
    const store = new MemoryStore({ now: () => now });
    for (let i = 0; i < 60; i += 1) {
      const payment = uniquePayload();
      await store.receive(`${String(payment.transaction_id)}:SUCCESSFUL`, payment, { id: 'crashed', ms: 1 });
    }
    now += 10; // the crashed process's leases have run out
    const ipn = router({ store, delivery: 'at-least-once' });
    ipn.on('successful', () => {});
    expect(await ipn.drain({ budgetMs: 0 })).toEqual({
      delivered: 50,
      retried: 0,
      dead: 0,
      swept: 0,
      left: 1,
    });
    expect(await ipn.drain({ budgetMs: 0 })).toEqual({
      delivered: 10,
      retried: 0,
      dead: 0,
      swept: 0,
      left: 0,
    });
  });

  test('a store that fails to hand out entries: an error event, left 1, and the promise still resolves', async () => {
    const store = new MemoryStore();
    store.lease = () => Promise.reject(new Error('connection reset'));
    const ipn = router({ store, delivery: 'at-least-once' });
    const recorder = recordEvents(ipn);
    await expect(ipn.drain()).resolves.toEqual({ delivered: 0, retried: 0, dead: 0, swept: 0, left: 1 });
    expect(recorder.of('error')[0].error.message).toMatch(/failed to hand out undelivered notifications/);
  });
});

describe('ipn.drain() at-most-once', () => {
  test('runs the verification retries due, and nothing of the inbox', async () => {
    const confirmed = uniquePayload();
    const unverifiable = uniquePayload();
    let serviceUp = false;
    const ipn = router({
      store: new MemoryStore(),
      verifyAttempts: 2,
      verifyRetryDelayMs: 30_000,
      verify: {
        getStatus: (id) =>
          !serviceUp || id === unverifiable.transaction_id
            ? Promise.reject(new StatusQueryError(id, 'the status service is down', { retryable: true }))
            : Promise.resolve(ipnNotificationSchema.parse(confirmed)),
      },
    });
    const recorder = recordEvents(ipn);
    ipn.on('successful', () => {});
    expect(await post(ipn, confirmed)).toBe(200);
    expect(await post(ipn, unverifiable)).toBe(200);
    expect(recorder.count('successful')).toBe(0);
    expect(await ipn.drain()).toEqual({ delivered: 0, retried: 0, dead: 0, swept: 0, left: 0 });

    serviceUp = true;
    later(31_000);
    const timers = jest.getTimerCount();
    expect(await ipn.drain()).toEqual({ delivered: 1, retried: 0, dead: 1, swept: 0, left: 0 });
    expect(recorder.count('successful')).toBe(1);
    expect(recorder.of('error')[0].error.name).toBe('VerificationError');
    expect(jest.getTimerCount()).toBe(timers);
    // The retries' own timers, when they fire, find nothing left to do: no second delivery.
    await jest.advanceTimersByTimeAsync(60_000);
    expect(recorder.count('successful')).toBe(1);
  });

  test('without verify nor expectations due: all counts 0', async () => {
    const ipn = router({ store: new MemoryStore() });
    ipn.on('successful', () => {});
    expect(await post(ipn, uniquePayload())).toBe(200);
    expect(await ipn.drain()).toEqual({ delivered: 0, retried: 0, dead: 0, swept: 0, left: 0 });
  });
});

describe('ipn.drain() and close()', () => {
  /** A promise and the function that resolves it. */
  const gate = () => {
    let open!: () => void;
    const opened = new Promise<void>((resolve) => (open = resolve));
    return { open, opened };
  };
  /** A MemoryStore holding one entry a crashed process left (its lease ran out), with the store's close spied. */
  async function crashedInbox() {
    let now = Date.now();
    const store = new MemoryStore({ now: () => now });
    const payment = uniquePayload({ custom_data: 'abandoned' });
    const key = `${String(payment.transaction_id)}:SUCCESSFUL`;
    await store.receive(key, payment, { id: 'crashed', ms: 1 });
    now += 10;
    const atClose: string[] = [];
    // MemoryStore has no close(): the router calls this one, as it would a PostgresStore's.
    Object.assign(store, {
      close: async () => void atClose.push((await store.get(key))?.status ?? 'none'),
    });
    return { store, key, atClose };
  }

  test('a drain called once close() has begun takes up nothing: the entry stays for the next process', async () => {
    jest.useRealTimers();
    const { store, key } = await crashedInbox();
    const ipn = router({ store, delivery: 'at-least-once' });
    const seen: string[] = [];
    ipn.on('successful', (n) => void seen.push(String(n.custom_data)));
    const closing = ipn.close();
    expect(await ipn.drain()).toEqual({ delivered: 0, retried: 0, dead: 0, swept: 0, left: 0 });
    await closing;
    expect(seen).toEqual([]);
    expect((await store.get(key))?.status).toBe('received');
  });

  test('close() waits for the inbox batch a running drain took up before it closes the store', async () => {
    jest.useRealTimers();
    const { store, key, atClose } = await crashedInbox();
    const ipn = router({ store, delivery: 'at-least-once' });
    const started = gate();
    const ledger = gate();
    ipn.on('successful', async () => {
      started.open();
      await ledger.opened; // a ledger call under way
    });
    const drained = ipn.drain();
    await started.opened;
    const closing = ipn.close({ timeoutMs: 10_000 });
    setImmediate(ledger.open); // the ledger answers once close() has had every chance to go on
    await closing;
    expect(atClose).toEqual(['delivered']); // the store closed after the listener and its delivered mark
    expect(await drained).toEqual({ delivered: 1, retried: 0, dead: 0, swept: 0, left: 0 });
    expect((await store.get(key))?.status).toBe('delivered');
  });

  test('a drain batch whose listener never settles holds close() at most its timeoutMs, and is reported', async () => {
    jest.useRealTimers();
    const { store, atClose } = await crashedInbox();
    const ipn = router({ store, delivery: 'at-least-once' });
    const recorder = recordEvents(ipn);
    const started = gate();
    ipn.on('successful', () => {
      started.open();
      return new Promise<void>(() => {}); // a ledger call that never comes back
    });
    void ipn.drain();
    await started.opened;
    await ipn.close({ timeoutMs: 50 });
    expect(atClose).toEqual(['received']);
    expect(recorder.of('error').map((event: { error: Error }) => event.error.message)).toEqual([
      expect.stringMatching(
        /inbox batch a drain\(\) or the recovery timer took up was still running after 50 ms/,
      ),
    ]);
  });

  test('while close() waits for the listeners already answered, the recovery timer takes up no new entry', async () => {
    let now = T0;
    const store = new MemoryStore({ now: () => now });
    const ipn = router({ store, delivery: 'at-least-once', recoveryIntervalMs: 1_000 });
    const started = gate();
    const ledger = gate();
    const seen: string[] = [];
    ipn.on('successful', async (n) => {
      seen.push(String(n.custom_data));
      if (n.custom_data !== 'slow') return;
      started.open();
      await ledger.opened;
    });
    const work: Array<Promise<unknown>> = [];
    await ipn.fetch(
      new Request('http://app.example/ipn', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(uniquePayload({ custom_data: 'slow' })),
      }),
      { waitUntil: (pending) => void work.push(pending) },
    );
    await started.opened;
    const closing = ipn.close({ timeoutMs: 60_000 });
    // Meanwhile another process crashed, leaving an entry whose lease runs out while this one closes.
    const payment = uniquePayload({ custom_data: 'abandoned' });
    const key = `${String(payment.transaction_id)}:SUCCESSFUL`;
    await store.receive(key, payment, { id: 'crashed', ms: 1 });
    now += 10;
    await jest.advanceTimersByTimeAsync(5_000); // five recovery intervals
    expect(seen).toEqual(['slow']);
    ledger.open();
    await Promise.all(work);
    await jest.advanceTimersByTimeAsync(0);
    await closing;
    expect(seen).toEqual(['slow']);
    expect((await store.get(key))?.status).toBe('received');
  });
});
