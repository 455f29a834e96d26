import { context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { ipnRouter, MemoryStore } from 'ipn-kit';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, settle } from '../helpers/servers.js';
import { until } from '../helpers/until.js';
import {
  gatedVerify,
  givingUpRouter,
  latch,
  NO_SWEEP,
  paid,
  perTestService,
  quietRouter,
  settledIn,
  statusClientOf,
  timedOut,
  untilFirst,
  watchedReads,
} from '../helpers/verified-payments.js';

// The review of 6838fef (an expectation settled once its copy is verified, not at the claim, at most once
// with verify) and 01864dd (an expectation unreadable where a record replaces a forgery is read again). Money
// first: a genuine copy verified and emitted must leave its expectation settled (else the sweep asks, and a
// record delivered once the claim is gone is a second credit), and a copy verification gives up on must leave
// it to the sweep.

const t = perTestService();
type Mode = 'at-most-once verify' | 'at-most-once statusClient' | 'at-least-once verify';
const MODES: Mode[] = ['at-most-once verify', 'at-most-once statusClient', 'at-least-once verify'];

const deliveryOf = (mode: Mode) => (mode.startsWith('at-least-once') ? 'at-least-once' : 'at-most-once');
const sourceOf = (mode: Mode, source: { getStatus: any }) =>
  mode.endsWith('verify') ? { verify: source as any } : { statusClient: source as any };

function routerOf(mode: Mode, store: MemoryStore, source: { getStatus: any }) {
  return quietRouter({
    store,
    delivery: deliveryOf(mode),
    ...sourceOf(mode, source),
    verifyAttempts: 3,
    verifyRetryDelayMs: 5,
    retryDelayMs: 5,
    reconcileAfterMs: 1,
  });
}

for (const mode of MODES) {
  test(`${mode}: a genuine copy emitted once settles its expectation; the sweep then asks nothing and credits nothing`, async () => {
    const id = await paid(t.provider);
    const store = new MemoryStore();
    const client = statusClientOf(t.provider);
    const { ipn, recorder, url } = await t.serve(routerOf(mode, store, client));
    await ipn.expect(id, { amount: 100, customData: 'order-a' });
    expect(await t.provider.forge({ ipnUrl: url, transactionId: id })).toBe(200);
    await untilFirst(recorder, 'successful', 'credited');
    expect(settledIn(store, id)).toBe(true);
    const swept = await ipn.sweep();
    expect(swept).toMatchObject({ queried: 0, reconciled: 0 });
    expect((await ipn.reconcile(id)).emitted).toBe(false);
    await settle();
    expect(recorder.count('successful')).toBe(1);
  });
}

/**
 * At most once, verification held at a gate: a paid transaction (100, order-a) expected at 100, and a copy of
 * it claimed and waiting to be verified (`open()` lets verification go on).
 */
async function copyUnderVerification() {
  const id = await paid(t.provider);
  const store = new MemoryStore();
  const client = statusClientOf(t.provider);
  const { verify, open } = gatedVerify(client);
  const served = await t.serve(routerOf('at-most-once verify', store, verify));
  await served.ipn.expect(id, { amount: 100 });
  await t.provider.forge({ ipnUrl: served.url, transactionId: id });
  return { id, store, client, open, ...served };
}

test('at-most-once verify: a genuine copy verified after a "can\'t tell" and a resend while pending settles its expectation once; one credit', async () => {
  const id = await paid(t.provider);
  const store = new MemoryStore();
  const client = statusClientOf(t.provider);
  let calls = 0;
  const { verify, open } = gatedVerify(client, {
    answer: (...args) => {
      if ((calls += 1) === 1) throw new Error('the service is down');
      return client.getStatus(...args);
    },
  });
  const { ipn, recorder, url } = await t.serve(routerOf('at-most-once verify', store, verify));
  await ipn.expect(id, { amount: 100 });
  await t.provider.forge({ ipnUrl: url, transactionId: id });
  // The service's resend, while the first copy is verified: not decided yet, 503 (resent later).
  expect(await t.provider.forge({ ipnUrl: url, transactionId: id })).toBe(503);
  expect(settledIn(store, id)).toBe(false); // not before verification
  open();
  await untilFirst(recorder, 'successful', 'credited');
  expect(await t.provider.forge({ ipnUrl: url, transactionId: id })).toBe(200); // the resend: a duplicate
  expect(recorder.count('duplicate')).toBe(1);
  expect(settledIn(store, id)).toBe(true);
  expect((await ipn.sweep()).queried).toBe(0);
  expect(recorder.count('successful')).toBe(1);
  expect(recorder.count('error')).toBe(0);
});

test("at-most-once verify: the service's record delivered in a forged copy's place settles the expectation; the sweep credits nothing more", async () => {
  const id = await paid(t.provider);
  const store = new MemoryStore();
  const client = statusClientOf(t.provider);
  const { ipn, recorder, url } = await t.serve(routerOf('at-most-once verify', store, client));
  await ipn.expect(id, { amount: 100 });
  await t.provider.forge({ ipnUrl: url, transactionId: id, customData: 'order-forged' });
  await untilFirst(recorder, 'successful', 'credited');
  expect(settledIn(store, id)).toBe(true);
  expect((await ipn.sweep()).queried).toBe(0);
  expect(recorder.of('successful')).toMatchObject([{ custom_data: 'order-a' }]);
});

test('at-most-once verify: a copy whose router closes mid-verification leaves the expectation unsettled (for the sweep)', async () => {
  const { id, store, client, open, ipn, recorder } = await copyUnderVerification();
  await t.running?.close();
  t.running = undefined;
  await ipn.close({ timeoutMs: 1 }); // verification still waiting for the service
  open();
  t.ipn = undefined;
  await settle();
  expect(recorder.count('successful')).toBe(0);
  expect(settledIn(store, id)).toBe(false);
  // The next process over the same store: its sweep delivers it, once.
  const nextIpn = (t.ipn = routerOf('at-most-once verify', store, client));
  const next = recordEvents(nextIpn);
  expect(await nextIpn.sweep()).toMatchObject({ reconciled: 1 });
  await settle();
  expect(next.count('successful')).toBe(1);
});

// expect() again while the first copy is being verified: the settle, now late, must not overwrite the newer
// expectation with the older one (its fields, its due time). Since 6838fef the settle runs after verification
// (seconds to minutes later, not at the claim); it retired the expectation as read before the claim, so a
// newer expect() of the same transaction meanwhile was replaced by the older one's tombstone (here custom_data
// lost). It now settles what the store holds then: one read more per verified copy (see "costs no read of its
// expectation beyond the check before the claim", genuine-record-expectation.test.ts).
test('at-most-once verify: expect() again during verification is not overwritten by the late settle of the older one', async () => {
  const { id, store, open, ipn, recorder } = await copyUnderVerification();
  await ipn.expect(id, { amount: 100, customData: 'order-a' });
  open();
  await untilFirst(recorder, 'successful', 'credited');
  expect(store.expectations.get(id)).toMatchObject({ customData: 'order-a' });
});

// The newer expectation contradicts the record verified and credited (the amount "corrected" to a wrong one):
// not settled in silence: `rejected` at once (see below for its message), the newer expectation settled with
// its own fields; the sweep asks nothing more, and credits nothing more.
test('at-most-once verify: expect() again during verification, contradicting the record credited: rejected at once, no second credit', async () => {
  const { id, store, open, ipn, recorder } = await copyUnderVerification();
  await ipn.expect(id, { amount: 50 });
  open();
  await untilFirst(recorder, 'rejected', 'the contradiction said');
  expect(settledIn(store, id)).toBe(true);
  expect(store.expectations.get(id)).toMatchObject({ amount: 50 });
  expect(await ipn.sweep()).toMatchObject({ queried: 0, reconciled: 0, rejected: 0 });
  await settle();
  expect(recorder.of('rejected')).toMatchObject([{ reason: 'mismatch', mismatches: ['amount'] }]);
  expect(recorder.of('successful')).toMatchObject([{ transaction_id: id, amount: 100 }]);
});

// The same, told accurately: the record was credited (its copy verified), so the `rejected` event must not
// say "not credited" (a listener marking the order unpaid, or an operator crediting it by hand, pays twice),
// and it must not wait for the sweep's query: the service unreachable by then, the sweep reported a payment
// already credited as `stale` ("no final notification") after reconcileAttempts queries, and no `rejected`.
for (const sweepAsks of ['answered', 'unreachable'] as const) {
  test(`at-most-once verify: expect() again during verification, contradicting the record credited, the sweep's query ${sweepAsks}: one rejected saying it was credited, no stale`, async () => {
    const id = await paid(t.provider);
    const store = new MemoryStore();
    const client = statusClientOf(t.provider);
    const { verify, open } = gatedVerify(client);
    const statusClient = sweepAsks === 'answered' ? client : { getStatus: timedOut };
    const { ipn, recorder, url } = await t.serve(
      quietRouter({ store, verify, statusClient, reconcileAfterMs: 1, reconcileAttempts: 1 }),
    );
    await ipn.expect(id, { amount: 100 });
    await t.provider.forge({ ipnUrl: url, transactionId: id });
    await ipn.expect(id, { amount: 50 });
    open();
    await untilFirst(recorder, 'successful', 'credited');
    await ipn.sweep();
    await settle();
    expect(recorder.of('successful')).toMatchObject([{ transaction_id: id, amount: 100 }]);
    expect(recorder.count('stale')).toBe(0);
    const rejected = recorder.of('rejected');
    expect(rejected).toMatchObject([{ reason: 'mismatch', mismatches: ['amount'] }]);
    expect(rejected[0].message).not.toMatch(/not credited/);
    expect(rejected[0].message).toMatch(/credited/);
    expect(recorder.count('error')).toBe(0);
  });
}

// An expectation deleted while its copy is verified (by hand, or its store's bound) is not written back.
test('at-most-once verify: an expectation deleted during verification is not written back by the late settle', async () => {
  const { id, store, open, recorder } = await copyUnderVerification();
  store.expectations.delete(id);
  open();
  await untilFirst(recorder, 'successful', 'credited');
  expect(store.expectations.get(id)).toBeUndefined();
  expect(recorder.count('error')).toBe(0);
});

// The late settle's read of the expectation fails, or is not answered within storeTimeoutMs: reported
// (`error`), never an unhandled rejection; the credit stands, and the expectation is left as it was (the sweep
// finds the key held and settles it).
for (const how of ['fails', 'never answers'] as const) {
  test(`at-most-once verify: the late settle's read of the expectation ${how}: reported, never an unhandled rejection`, async () => {
    const id = await paid(t.provider);
    const store = new MemoryStore();
    const client = statusClientOf(t.provider);
    const { verify, open } = gatedVerify(client);
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => void unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const { ipn, recorder, url } = await t.serve(
        quietRouter({ store, verify, storeTimeoutMs: 50, reconcileAfterMs: 1 }),
      );
      await ipn.expect(id, { amount: 100 });
      await t.provider.forge({ ipnUrl: url, transactionId: id });
      const get = store.expectations.get.bind(store.expectations);
      const held = store.expectations as unknown as Record<string, unknown>;
      held.get = (transactionId: string) => {
        if (transactionId !== id) return get(transactionId);
        if (how === 'fails') throw new Error('the store is down');
        return new Promise<never>(() => {});
      };
      open();
      await until(() => recorder.count('error') > 0, 'the read reported');
      await settle();
      held.get = get;
      const messages = recorder.of('error').map((e: { error: Error }) => e.error.message);
      expect(messages).toEqual([expect.stringContaining(`the expectation of ${id}`)]);
      expect(messages[0]).toContain(how === 'fails' ? 'the store is down' : 'storeTimeoutMs');
      expect(recorder.count('successful')).toBe(1);
      expect(settledIn(store, id)).toBe(false);
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });
}

// The sweep runs while a forged copy matching the expectation is being verified (the expectation was due: the
// notification came late, or verification is retrying): the key is held, so the sweep's record is "already
// handled", and the expectation is settled. Verification then gives up on the forgery and releases the key:
// the genuine copy that came meanwhile was answered 503 (the service resends it), but the sweep must not
// count on the resend: it still asks.
test('at-most-once verify: a sweep while a forged copy is verified, then given up on: the expectation is still left to the sweep', async () => {
  const id = await paid(t.provider);
  const store = new MemoryStore();
  const client = statusClientOf(t.provider);
  // Verification's queries time out (the sweep's, with no time limit, are answered).
  const { verify, open } = gatedVerify(client, { answer: timedOut });
  const { ipn, recorder, url } = await t.serve(givingUpRouter(store, verify, client));
  await ipn.expect(id, { amount: 100 });
  await t.provider.forge({ ipnUrl: url, transactionId: id, customData: 'order-forged' });
  // The genuine copy: the forgery's fate not decided, 503 (the service would resend it).
  expect(await t.provider.forge({ ipnUrl: url, transactionId: id })).toBe(503);
  await ipn.sweep(); // the key is held by the forgery being verified
  open();
  await untilFirst(recorder, 'error', 'verification given up');
  expect(recorder.count('successful')).toBe(0);
  expect(settledIn(store, id)).toBe(false);
  // The sweep asks again, and delivers the service's record, once.
  expect(await ipn.sweep()).toMatchObject({ reconciled: 1 });
  await settle();
  expect(recorder.of('successful')).toMatchObject([{ transaction_id: id, custom_data: 'order-a' }]);
  expect((await ipn.reconcile(id)).emitted).toBe(false);
});

test('at-most-once verify: a sweep while a forged copy is verified, then the router closed: the next process sweeps it', async () => {
  const id = await paid(t.provider);
  const store = new MemoryStore();
  const client = statusClientOf(t.provider);
  const { verify, open } = gatedVerify(client);
  const settings = {
    store,
    verify,
    statusClient: client,
    logger: quiet,
    reconcileAfterMs: 1,
    sweepIntervalMs: NO_SWEEP,
  };
  const ipn = (t.ipn = ipnRouter(settings));
  t.running = await listen(ipn);
  const url = `${t.running.url}/`;
  await ipn.expect(id, { amount: 100 });
  await t.provider.forge({ ipnUrl: url, transactionId: id, customData: 'order-forged' });
  await t.provider.forge({ ipnUrl: url, transactionId: id }); // the genuine copy, a duplicate
  await ipn.sweep(); // the key is held by the forgery being verified
  await t.running?.close();
  t.running = undefined;
  await ipn.close({ timeoutMs: 1 });
  open();
  await settle();
  const next = (t.ipn = ipnRouter(settings));
  const recorder = recordEvents(next);
  expect(await next.sweep()).toMatchObject({ reconciled: 1 });
  await settle();
  expect(recorder.of('successful')).toMatchObject([{ transaction_id: id, custom_data: 'order-a' }]);
});

// 01864dd: a store that never answers the read: verifyAttempts reads, then one error, no unhandled rejection.
// At most once, verification given up makes the expectation due again, on what the store holds then: one read
// more, which fails too (reported as the second error). That read is what keeps an ipn.expect() made during
// verification (settle-due-review.test.ts, "expect() again during verification"): money first. At least once
// the same: the entry dead unverified makes its expectation (settled at the claim) due again.
for (const delivery of ['at-most-once', 'at-least-once'] as const) {
  test(`${delivery}: an expectation the store never reads where a record replaces a forgery: bounded reads, one rejected and one error per attempt budget`, async () => {
    const id = await paid(t.provider);
    const store = new MemoryStore();
    const watched = watchedReads(store, id, (read) => read > 1);
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => void unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const client = statusClientOf(t.provider);
      const { ipn, recorder, url } = await t.serve(
        quietRouter({
          store,
          delivery,
          verify: client,
          verifyAttempts: 4,
          maxAttempts: 3,
          verifyRetryDelayMs: 5,
          retryDelayMs: 5,
        }),
      );
      await ipn.expect(id, { amount: 100 });
      await t.provider.forge({ ipnUrl: url, transactionId: id, customData: 'order-forged' });
      await until(() => recorder.count(delivery === 'at-most-once' ? 'error' : 'dead') > 0, 'given up');
      await settle();
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(recorder.count('successful')).toBe(0);
      if (delivery === 'at-most-once') {
        // verifyAttempts reads after the check before the claim, then the give-up's (to make it due again)
        expect(watched.reads - 1).toBe(4 + 1);
        expect(recorder.count('rejected')).toBe(1);
        const messages = recorder.of('error').map((e: { error: Error }) => e.error.message);
        expect(messages).toEqual([
          expect.stringContaining("its record not delivered in a forgery's place"),
          expect.stringContaining('to make it due again'),
        ]);
      } else {
        // maxAttempts reads, then the give-up's (dead unverified: its expectation made due again)
        expect(watched.reads - 1).toBe(3 + 1);
        expect(recorder.count('dead')).toBe(1);
      }
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });
}

// A claim that lands after storeTimeoutMs (answered 503, then delivered late: the service's resend is its
// duplicate) is verified and credited, but its expectation was never settled: the admission was a store
// failure. The sweep then asks about a credited payment, and delivers its record a second time once the
// claim has expired (ttlMs shorter than the time to the sweep's query, or a claim store that lost it).
for (const mode of MODES) {
  test(`${mode}: a claim landing after storeTimeoutMs settles the expectation of the copy it credits`, async () => {
    const id = await paid(t.provider);
    const store = new MemoryStore();
    const { gate, open } = latch();
    let slow = true;
    // At least once the inbox's receive is the claim.
    const method = mode.startsWith('at-least-once') ? 'receive' : 'claim';
    const original = (store[method] as (...args: unknown[]) => unknown).bind(store);
    (store as unknown as Record<string, unknown>)[method] = (...args: unknown[]) => {
      if (!slow || !String(args[0]).startsWith(id)) return original(...args);
      slow = false;
      return gate.then(() => original(...args));
    };
    const client = statusClientOf(t.provider);
    const { ipn, recorder, url } = await t.serve(
      quietRouter({
        store,
        delivery: deliveryOf(mode),
        ...sourceOf(mode, client),
        storeTimeoutMs: 20,
        retryDelayMs: 5,
        reconcileAfterMs: 1,
      }),
    );
    await ipn.expect(id, { amount: 100 });
    expect(await t.provider.forge({ ipnUrl: url, transactionId: id })).toBe(503);
    open();
    await untilFirst(recorder, 'successful', 'credited late');
    expect(settledIn(store, id)).toBe(true);
    expect((await ipn.sweep()).queried).toBe(0);
    expect(recorder.count('successful')).toBe(1);
  });
}

test('at-most-once verify: a forged and the genuine copy at once: one claims, one credit, the expectation settled', async () => {
  const id = await paid(t.provider);
  const store = new MemoryStore();
  const client = statusClientOf(t.provider);
  const { ipn, recorder, url } = await t.serve(routerOf('at-most-once verify', store, client));
  await ipn.expect(id, { amount: 100 });
  const answers = await Promise.all([
    t.provider.forge({ ipnUrl: url, transactionId: id, customData: 'order-forged' }),
    t.provider.forge({ ipnUrl: url, transactionId: id }),
  ]);
  await untilFirst(recorder, 'successful', 'credited');
  // The other copy: a duplicate, or answered 503 while the first one was being verified.
  expect(answers).toContain(200);
  expect(recorder.count('duplicate') + answers.filter((status) => status === 503).length).toBe(1);
  expect(settledIn(store, id)).toBe(true);
  expect((await ipn.sweep()).queried).toBe(0);
  expect(recorder.of('successful')).toMatchObject([{ custom_data: 'order-a' }]);
});

// At most once, the claim is in the store and verification in memory: a process that stops between the two
// (no close()) leaves a claimed key nothing delivers. The expectation, unsettled since 6838fef, is the next
// process's sweep's to ask about; but the sweep takes the held key for a delivered copy and settles it, so
// the payment is lost (as it was before 6838fef, when the claim had settled it). Left failing: telling a
// held key from a delivered one needs the claim store's help, and a sweep that does not settle on a held key
// credits a second time wherever the claim expires before its next query. At most once's stated limit.
test.failing(
  'at-most-once verify: a process that stops between the claim and verification: the next process sweeps the payment',
  async () => {
    const id = await paid(t.provider);
    const store = new MemoryStore();
    const client = statusClientOf(t.provider);
    const never = { getStatus: () => new Promise<never>(() => {}) }; // the process stops before any answer
    const stopped = routerOf('at-most-once verify', store, never);
    const served = await listen(stopped);
    try {
      await stopped.expect(id, { amount: 100 });
      expect(await t.provider.forge({ ipnUrl: `${served.url}/`, transactionId: id })).toBe(200);
      const ipn = (t.ipn = routerOf('at-most-once verify', store, client)); // the next process, over the same store
      const recorder = recordEvents(ipn);
      await ipn.sweep();
      await settle();
      expect(recorder.count('successful')).toBe(1);
    } finally {
      await served.close();
      await stopped.close({ timeoutMs: 1 });
    }
  },
);

// Traced, the first verification runs in its span (traceAttempt): the same settle, and the same reopen.
describe('traced', () => {
  const exporter = new InMemorySpanExporter();
  beforeAll(() => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    trace.setGlobalTracerProvider(
      new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }),
    );
  });
  afterAll(() => {
    trace.disable();
    context.disable();
  });

  test('at-most-once verify: a genuine copy settles its expectation; a forgery given up on after a sweep leaves it to the sweep', async () => {
    const id = await paid(t.provider);
    const other = await paid(t.provider);
    const store = new MemoryStore();
    const client = statusClientOf(t.provider);
    const { verify, open } = gatedVerify(client, {
      answer: timedOut,
      holds: (transactionId) => transactionId === other,
    });
    const { ipn, recorder, url } = await t.serve(givingUpRouter(store, verify, client));
    await ipn.expect(id, { amount: 100 });
    await ipn.expect(other, { amount: 100 });
    await t.provider.forge({ ipnUrl: url, transactionId: id });
    await untilFirst(recorder, 'successful', 'credited');
    expect(settledIn(store, id)).toBe(true);
    await t.provider.forge({ ipnUrl: url, transactionId: other, customData: 'order-forged' });
    await ipn.sweep(); // the other's key is held by the forgery being verified
    open();
    await untilFirst(recorder, 'error', 'verification given up');
    expect(settledIn(store, other)).toBe(false);
    expect(await ipn.sweep()).toMatchObject({ reconciled: 1 });
    await settle();
    expect(recorder.of('successful')).toMatchObject([{ transaction_id: id }, { transaction_id: other }]);
    expect(exporter.getFinishedSpans().length).toBeGreaterThan(0);
  });
});
