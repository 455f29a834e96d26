import { ipnRouter, MemoryStore } from 'ipn-kit';
import { adminRouter } from 'ipn-kit/admin';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, settle } from '../helpers/servers.js';
import { until } from '../helpers/until.js';
import {
  gatedVerify,
  NO_SWEEP,
  paid,
  settledIn,
  perTestService,
  quietRouter,
  statusClientOf,
  untilFirst,
  watchedReads,
} from '../helpers/verified-payments.js';

// A copy the service contradicts in amount only is a forgery of a real payment, and the service's own record
// is delivered in its place (genuineRecord). That record must match the transaction's expectation too, as
// the sweep requires ("contradicts its expectation: not credited") and as the genuine copy itself must (it
// is rejected with no query): else a forged copy matching the expectation got a contradicting record
// credited. Found while reviewing the several-keys change (merge f79dd63), where a record found under
// another account than the one named reaches the same path.

const t = perTestService();
for (const delivery of ['at-most-once', 'at-least-once'] as const) {
  test(`${delivery}: a forged copy matching its expectation never gets a service record contradicting that expectation credited`, async () => {
    // The service's record says 100; the partner expects 5000 for this order.
    const id = await paid(t.provider);
    const verify = statusClientOf(t.provider);
    const { ipn, recorder, url } = await t.serve(
      quietRouter({ store: new MemoryStore(), delivery, verify, verifyRetryDelayMs: 5 }),
    );
    await ipn.expect(id, { amount: 5000, customData: 'order-a' });
    await t.provider.forge({ ipnUrl: url, transactionId: id, amount: 5000 });
    // The forgery, then the service's record, which contradicts the expectation: neither credited.
    await until(
      () => recorder.count('rejected') + recorder.count('successful') >= 2,
      'the forgery and its record decided',
    );
    await settle();
    expect(recorder.of('rejected')).toMatchObject([
      { reason: 'mismatch', mismatches: ['amount'], notification: { amount: 5000 } },
      { reason: 'mismatch', mismatches: ['amount'], notification: { amount: 100 } },
    ]);
    expect(recorder.count('successful')).toBe(0);
  });
}

test("an expectation the store cannot read where verification ends: the record is not delivered in the forgery's place, an error", async () => {
  const id = await paid(t.provider);
  const store = new MemoryStore();
  // The check before the claim reads it; the read after verification fails.
  watchedReads(store, id, (read) => read > 1);
  const verify = statusClientOf(t.provider);
  const { ipn, recorder, url } = await t.serve(quietRouter({ store, verify, verifyRetryDelayMs: 5 }));
  await ipn.expect(id, { amount: 100 });
  // The forged copy alters custom_data only, which the expectation does not hold.
  await t.provider.forge({ ipnUrl: url, transactionId: id, customData: 'order-forged' });
  await until(() => recorder.count('error') + recorder.count('successful') > 0, 'an outcome');
  await settle();
  expect(recorder.count('successful')).toBe(0);
  expect((recorder.of('error')[0] as { error: Error }).error.message).toMatch(/the store is down/);
  // After verifyAttempts reads, the error carries the service's record, for ipn.reconcile() later; then the
  // read that would make the expectation due again (on what the store holds then) fails too, reported.
  expect(recorder.of('error')).toMatchObject([
    { notification: { custom_data: 'order-a' } },
    { error: { message: expect.stringContaining('to make it due again') } },
  ]);
  expect(recorder.count('rejected')).toBe(1);
});

// An expectation read that fails once, while the genuine copy was already answered as a duplicate of the
// forgery's key: releasing that key lost the payment. Nothing else brings it back: the service got its 200,
// and the forgery's claim settled the expectation (the sweep no longer asks about it). A read that fails is
// retried as an unanswered verification is (at least once: the entry stays in the inbox, failed, and is
// taken up again), and the record is credited once the store answers.
for (const delivery of ['at-most-once', 'at-least-once'] as const) {
  test(`${delivery}: an expectation the store fails to read once, the genuine copy answered as a duplicate meanwhile: the record is still credited`, async () => {
    const id = await paid(t.provider);
    const store = new MemoryStore();
    let failures = 0;
    watchedReads(store, id, () => {
      if (failures === 0) return false;
      failures -= 1;
      return true;
    });
    // Verification waits until the genuine copy has come.
    const { verify, open } = gatedVerify(statusClientOf(t.provider));
    const { ipn, recorder, url } = await t.serve(
      quietRouter({ store, delivery, verify, verifyRetryDelayMs: 5, retryDelayMs: 5 }),
    );
    await ipn.expect(id, { amount: 100 });
    // The forged copy alters custom_data only, which the expectation does not hold.
    await t.provider.forge({ ipnUrl: url, transactionId: id, customData: 'order-forged' });
    // The genuine copy, unaltered: a duplicate of the forgery's key (at most once, answered 503 while the
    // forgery is being verified: the service would resend it).
    const answer = delivery === 'at-most-once' ? 503 : 200;
    expect(await t.provider.forge({ ipnUrl: url, transactionId: id })).toBe(answer);
    expect(recorder.count('duplicate')).toBe(answer === 200 ? 1 : 0);
    failures = 1;
    open();
    await until(() => recorder.count('successful') + recorder.count('error') > 0, 'an outcome');
    await settle();
    await ipn.sweep(); // the store answers again
    expect(recorder.of('successful')).toMatchObject([
      { transaction_id: id, amount: 100, custom_data: 'order-a' },
    ]);
    // Only the forgery rejected (at least once, by each attempt, as each verifies afresh); no error left.
    expect(
      recorder
        .of('rejected')
        .map((r: { notification: { custom_data: string } }) => r.notification.custom_data),
    ).toEqual(delivery === 'at-most-once' ? ['order-forged'] : ['order-forged', 'order-forged']);
    expect(recorder.count('error')).toBe(0);
  });
}

test('at-least-once: a forged copy kept in the inbox and taken up after a restart is checked the same way (its record contradicting the expectation is not credited)', async () => {
  const id = await paid(t.provider);
  const store = new MemoryStore();
  const verify = statusClientOf(t.provider);
  const settings = {
    store,
    delivery: 'at-least-once',
    verify,
    logger: quiet,
    retryDelayMs: 5,
    sweepIntervalMs: NO_SWEEP,
  } as const;
  const first = ipnRouter(settings);
  const served = await listen(first);
  await first.expect(id, { amount: 5000 });
  await first.inbox.pause(); // kept in the inbox, not attempted: the process stops
  expect(await t.provider.forge({ ipnUrl: `${served.url}/`, transactionId: id, amount: 5000 })).toBe(200);
  await served.close();
  await first.close();
  // The next process over the same store takes it up.
  const ipn = (t.ipn = ipnRouter(settings));
  const recorder = recordEvents(ipn);
  await ipn.inbox.resume();
  await until(() => recorder.count('rejected') >= 2, 'the forgery and its record rejected');
  await settle();
  expect(recorder.of('rejected')).toMatchObject([
    { reason: 'mismatch', notification: { amount: 5000 } },
    { reason: 'mismatch', notification: { amount: 100 } },
  ]);
  expect(recorder.count('successful')).toBe(0);
});

// Older than cf9245d, found reviewing it: a copy that matched its expectation settled it at the claim, before
// verification. A forged one that verification then did not confirm (here: the service unreachable for
// verifyAttempts; also a forged SUCCESSFUL of a transaction still pending) had settled the expectation all the
// same, so the sweep no longer asked about it: the genuine copy, answered meanwhile as a duplicate of the
// forgery's key, was lost but for the `error` event. At most once with verify, it is settled once verified.
// (At least once the forgery stays in the inbox, failed then dead, until a replay: nothing is lost there.)
test('at-most-once: a forged copy matching its expectation that verification gives up on leaves the expectation to the sweep', async () => {
  const id = await paid(t.provider);
  const client = statusClientOf(t.provider);
  let down = true;
  // Held until the genuine copy has come.
  const { verify, open } = gatedVerify(client, {
    answer: (...args) => {
      if (down) throw new Error('the service is down');
      return client.getStatus(...args);
    },
  });
  const { ipn, recorder, url } = await t.serve(
    quietRouter({
      store: new MemoryStore(),
      verify,
      verifyAttempts: 2,
      verifyRetryDelayMs: 5,
      reconcileAfterMs: 1,
    }),
  );
  await ipn.expect(id, { amount: 100 });
  await t.provider.forge({ ipnUrl: url, transactionId: id, customData: 'order-forged' });
  // The genuine copy, while the forgery is being verified: answered 503 (the service would resend it; the
  // sweep must not count on that).
  expect(await t.provider.forge({ ipnUrl: url, transactionId: id })).toBe(503);
  open();
  await until(() => recorder.count('error') > 0, 'verification given up');
  down = false;
  await ipn.sweep();
  await settle();
  expect(recorder.of('successful')).toMatchObject([{ transaction_id: id, custom_data: 'order-a' }]);
});

// The review of cf9245d: the record in a forgery's place is held to exactly what the router holds a genuine
// copy to (the expectation's fields only, custom_data as the same JSON value), in either final state.
for (const delivery of ['at-most-once', 'at-least-once'] as const) {
  test(`${delivery}: a FAILED record contradicting its expectation is not delivered in a forged FAILED copy's place; one matching it in custom_data's JSON value only is`, async () => {
    const failedId = await paid(t.provider, { outcome: 'FAILED' });
    const paidId = await paid(t.provider, { customData: '{"orderId": "b", "n": 12.50}' });
    const verify = statusClientOf(t.provider);
    const { ipn, recorder, url } = await t.serve(
      quietRouter({ store: new MemoryStore(), delivery, verify, verifyRetryDelayMs: 5 }),
    );
    await ipn.expect(failedId, { amount: 5000 });
    // custom_data only, as the same JSON value; the amount not held.
    await ipn.expect(paidId, { customData: { n: 12.5, orderId: 'b' } });
    await t.provider.forge({
      ipnUrl: url,
      transactionId: failedId,
      state: 'FAILED',
      amount: 5000,
    });
    await t.provider.forge({ ipnUrl: url, transactionId: paidId, amount: 5000 });
    await until(() => recorder.count('rejected') >= 3 && recorder.count('notification') >= 1, 'decided');
    await settle();
    expect(recorder.count('failed')).toBe(0);
    expect(recorder.of('successful')).toMatchObject([{ transaction_id: paidId, amount: 100 }]);
    expect(recorder.of('rejected')).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          notification: expect.objectContaining({ transaction_id: failedId, amount: 100 }),
        }),
      ]),
    );
  });
}

// At most once, verified after the claim, the settle reads the expectation the store holds then: one read
// more, the one that keeps an ipn.expect() made during verification (settle-after-verify.test.ts, "expect()
// again during verification"): money first. At least once (the benchmark's path) it is settled at the claim,
// as at most once without verify: no read.
for (const delivery of ['at-most-once', 'at-least-once'] as const) {
  const settleRead = delivery === 'at-most-once' ? ' and the late settle' : '';
  test(`${delivery}: a genuine copy that verification confirms costs no read of its expectation beyond the check before the claim${settleRead}`, async () => {
    const id = await paid(t.provider);
    const store = new MemoryStore();
    const watched = watchedReads(store, id);
    const verify = statusClientOf(t.provider);
    const { ipn, recorder, url } = await t.serve(quietRouter({ store, delivery, verify }));
    await ipn.expect(id, { amount: 100, customData: 'order-a' });
    await t.provider.forge({ ipnUrl: url, transactionId: id }); // the genuine copy, unaltered
    await untilFirst(recorder, 'successful', 'credited');
    expect(watched.reads).toBe(delivery === 'at-most-once' ? 2 : 1);
  });
}

// ipn.reconcile() delivered the service's record without reading its expectation: the sweep rejects a record
// that contradicts it ("contradicts its expectation: not credited"), but the operator's reconcile of the same
// transaction credited it (expected 5000, the service's record 100: 100 credited). It is held to the same rule.
for (const delivery of ['at-most-once', 'at-least-once'] as const) {
  test(`${delivery}: ipn.reconcile() does not credit a record that contradicts its expectation; it credits one that matches`, async () => {
    const contradicted = await paid(t.provider); // the service says 100
    const matching = await paid(t.provider);
    const verify = statusClientOf(t.provider);
    const { ipn, recorder } = await t.serve(quietRouter({ store: new MemoryStore(), delivery, verify }));
    await ipn.expect(contradicted, { amount: 5000 });
    await ipn.expect(matching, { amount: 100, customData: 'order-a' });
    await expect(ipn.reconcile(contradicted)).resolves.toMatchObject({ emitted: false, rejected: true });
    await expect(ipn.reconcile(matching)).resolves.toMatchObject({ emitted: true, rejected: false });
    await settle();
    expect(recorder.of('rejected')).toMatchObject([
      {
        reason: 'mismatch',
        mismatches: ['amount'],
        notification: { transaction_id: contradicted, amount: 100 },
      },
    ]);
    expect(recorder.of('successful')).toMatchObject([{ transaction_id: matching }]);
  });
}

test('ipn.reconcile(): an expectation the store cannot read rejects with a StoreError and credits nothing', async () => {
  const id = await paid(t.provider);
  const store = new MemoryStore();
  const verify = statusClientOf(t.provider);
  const { ipn, recorder } = await t.serve(quietRouter({ store, verify }));
  await ipn.expect(id, { amount: 100 });
  watchedReads(store, id, () => true); // every read of it fails from now on
  await expect(ipn.reconcile(id)).rejects.toMatchObject({
    name: 'StoreError',
    message: expect.stringMatching(/failed to read the expectation .*the store is down/),
  });
  await settle();
  expect(recorder.count('successful')).toBe(0);
});

test("the operator page's reconcile says a record contradicting its expectation was not delivered", async () => {
  const id = await paid(t.provider); // the service says 100
  const verify = statusClientOf(t.provider);
  const { ipn, recorder } = await t.serve(quietRouter({ store: new MemoryStore(), verify }));
  await ipn.expect(id, { amount: 5000 });
  const { status, text, confirmation } = await reconcileOnPage(ipn, id);
  // The confirmation does not promise a delivery of whatever the service says.
  expect(confirmation).toContain('unless it contradicts its expectation');
  expect(status).toBe(200);
  expect(text).toContain('the record contradicts its expectation');
  expect(recorder.count('successful')).toBe(0);
  expect(recorder.count('rejected')).toBe(1);
});

// The review of 31caf28: the sweep settles the expectation of a record it rejected or credited (kept for ttlMs
// to check late copies against, never asked about again); ipn.reconcile() left it due. The sweep then asked
// the service again, and emitted a second `rejected` for the record reconcile had rejected; or, the service
// unreachable at its last attempt, reported the payment reconcile had credited `stale` ("no final
// notification ... not reconciled": a false alert). A FAILED record keeps it, as the sweep's does.
for (const delivery of ['at-most-once', 'at-least-once'] as const) {
  test(`${delivery}: a record ipn.reconcile() rejected is not asked about, nor rejected, again by the sweep`, async () => {
    const id = await paid(t.provider); // the service says 100
    const store = new MemoryStore();
    const verify = statusClientOf(t.provider);
    const { ipn, recorder } = await t.serve(quietRouter({ store, delivery, verify, reconcileAfterMs: 1 }));
    await ipn.expect(id, { amount: 5000 });
    await expect(ipn.reconcile(id)).resolves.toMatchObject({ emitted: false, rejected: true });
    await expect(ipn.sweep()).resolves.toMatchObject({ queried: 0, rejected: 0 });
    await settle();
    expect(recorder.count('rejected')).toBe(1);
    expect(settledIn(store, id)).toBe(true); // still there for late copies
    expect(recorder.count('successful')).toBe(0);
  });
}

test('a payment ipn.reconcile() credited is not reported stale by the sweep; a FAILED one keeps its expectation', async () => {
  const id = await paid(t.provider);
  const failedId = await paid(t.provider, { outcome: 'FAILED' });
  const store = new MemoryStore();
  const client = statusClientOf(t.provider);
  let down = false;
  const statusClient = {
    getStatus: (...args: Parameters<typeof client.getStatus>) => {
      if (down) throw new Error('the service is down');
      return client.getStatus(...args);
    },
  };
  const { ipn, recorder } = await t.serve(
    quietRouter({ store, statusClient, reconcileAfterMs: 1, reconcileAttempts: 1 }),
  );
  await ipn.expect(id, { amount: 100 });
  await ipn.expect(failedId, { amount: 100 });
  await expect(ipn.reconcile(id)).resolves.toMatchObject({ emitted: true, rejected: false });
  await expect(ipn.reconcile(failedId)).resolves.toMatchObject({ emitted: true, rejected: false });
  expect(settledIn(store, id)).toBe(true);
  expect(settledIn(store, failedId)).toBe(false); // the service may still turn it SUCCESSFUL
  down = true; // the sweep's last attempt cannot reach the service
  await ipn.sweep();
  await settle();
  expect(recorder.of('successful')).toMatchObject([{ transaction_id: id }]);
  expect(recorder.of('stale')).toMatchObject([{ transactionId: failedId }]);
});

test('ipn.reconcile(): the expectation settled where the store then fails is an error event; the page still says the record was not delivered', async () => {
  const id = await paid(t.provider); // the service says 100
  const store = new MemoryStore();
  const verify = statusClientOf(t.provider);
  const { ipn, recorder } = await t.serve(quietRouter({ store, verify }));
  await ipn.expect(id, { amount: 5000 });
  store.expectations.put = () => {
    throw new Error('the store is down');
  };
  const { status, text } = await reconcileOnPage(ipn, id);
  expect(status).toBe(200);
  expect(text).toContain('the record contradicts its expectation');
  await settle();
  expect(recorder.count('rejected')).toBe(1);
  expect(recorder.count('successful')).toBe(0);
  expect(recorder.of('error')).toMatchObject([
    { error: { name: 'StoreError', message: expect.stringMatching(/failed to settle the expectation/) } },
  ]);
});

test("ipn.reconcile()'s StoreError for an expectation it cannot read says what was not done, on the operator's page too", async () => {
  const id = await paid(t.provider);
  const store = new MemoryStore();
  const verify = statusClientOf(t.provider);
  const { ipn, recorder } = await t.serve(quietRouter({ store, verify }));
  await ipn.expect(id, { amount: 100 });
  watchedReads(store, id, () => true);
  const { status, text } = await reconcileOnPage(ipn, id);
  expect(status).toBe(409);
  expect(text).toMatch(
    /IPN_STORE_FAILED: the store failed to read the expectation of .*: the service&#39;s record not delivered/,
  );
  expect(text).not.toContain('forgery');
  expect(recorder.count('successful')).toBe(0);
});

/** Reconciles `id` on an operator's page of `ipn` (the CSRF cookie from its confirmation first). */
async function reconcileOnPage(
  ipn: Parameters<typeof adminRouter>[0]['ipn'],
  id: string,
): Promise<{ status: number; text: string; confirmation: string }> {
  const page = await listen(adminRouter({ ipn, authorize: () => true, logger: quiet }));
  try {
    const first = await fetch(`${page.url}/confirm?action=reconcile&transaction=${encodeURIComponent(id)}`);
    const cookie = (first.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
    const answer = await fetch(`${page.url}/reconcile`, {
      method: 'POST',
      headers: { cookie, 'content-type': 'application/x-www-form-urlencoded' },
      body: `csrf=${cookie.split('=')[1] ?? ''}&transaction=${encodeURIComponent(id)}`,
    });
    return { status: answer.status, text: await answer.text(), confirmation: await first.text() };
  } finally {
    await page.close();
  }
}
