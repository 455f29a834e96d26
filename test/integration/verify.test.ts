import {
  ipnNotificationSchema,
  ipnRouter,
  MemoryStore,
  StatusQueryError,
  StatusRateLimitError,
  TransactionNotFoundError,
  VerificationError,
  type Options,
  type StatusSource,
} from '../../lib/index.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, settle, type Running } from '../helpers/servers.js';
import { until } from '../helpers/until.js';

/** A status source over a table of records the test controls; unknown ids are not found. */
function fakeSource(records: Record<string, Record<string, unknown>> = {}) {
  const calls: string[] = [];
  let failWith: Error | undefined;
  let gate: Promise<void> | undefined;
  const source: StatusSource = {
    async getStatus(id) {
      calls.push(id);
      await gate;
      if (failWith !== undefined) throw failWith;
      const record = records[id];
      if (record === undefined) throw new TransactionNotFoundError(id);
      return ipnNotificationSchema.parse(record);
    },
  };
  return {
    source,
    records,
    calls,
    failWith: (error: Error | undefined) => {
      failWith = error;
    },
    /** Holds every answer until the returned function is called. */
    hold: () => {
      let open = () => {};
      gate = new Promise<void>((resolve) => {
        open = resolve;
      });
      return () => {
        gate = undefined;
        open();
      };
    },
  };
}

const servers: Running[] = [];
const routers: Array<{ close: () => Promise<void> }> = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => server.close()));
  await Promise.all(routers.splice(0).map((router) => router.close()));
});

async function start(options: Partial<Options>) {
  const ipn = ipnRouter({ logger: quiet, verifyRetryDelayMs: 5, ...options });
  routers.push(ipn);
  const running = await listen(ipn);
  servers.push(running);
  const post = (body: unknown, path = '/') =>
    fetch(running.url + path, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  return { ipn, recorder: recordEvents(ipn), post, url: running.url };
}

describe('ipnRouter({ verify })', () => {
  test('a genuine notification is answered 200 and emitted once the service confirms it', async () => {
    const payload = uniquePayload();
    const fake = fakeSource({ [payload.transaction_id as string]: payload });
    const { recorder, post } = await start({ verify: fake.source });

    const response = await post(payload);
    expect(response.status).toBe(200);
    await until(() => recorder.count('successful') === 1, 'the successful event');
    expect(recorder.of('successful')[0]).toMatchObject({
      transaction_id: payload.transaction_id,
      custom_data: payload.custom_data,
    });
    expect(recorder.count('rejected')).toBe(0);
    expect(fake.calls).toEqual([payload.transaction_id]);
  });

  test('a forged SUCCESSFUL for an id the service does not know is rejected and never emitted', async () => {
    const fake = fakeSource();
    const { recorder, post } = await start({ verify: fake.source });
    const forged = uniquePayload();

    expect((await post(forged)).status).toBe(200);
    await until(() => recorder.count('rejected') === 1, 'the rejected event');
    expect(recorder.of('rejected')[0]).toMatchObject({
      reason: 'not_found',
      mismatches: [],
      notification: { transaction_id: forged.transaction_id },
    });
    expect(recorder.count('successful')).toBe(0);
    expect(recorder.count('notification')).toBe(0);
  });

  test.each([
    ['amount', { amount: 999999 }, ['amount']],
    ['custom_data', { custom_data: 'someone-elses-order' }, ['custom_data']],
  ])(
    'a notification whose %s differs from the service record is rejected, and the service record is delivered in its place',
    async (_field, change, mismatches) => {
      const genuine = uniquePayload();
      const fake = fakeSource({ [genuine.transaction_id as string]: genuine });
      const { recorder, post } = await start({ verify: fake.source });

      await post({ ...genuine, ...change });
      await until(() => recorder.count('successful') === 1, 'the successful event');
      const [event] = recorder.of('rejected');
      expect(event).toMatchObject({ reason: 'mismatch', mismatches });
      expect(event.notification).toMatchObject(change);
      // The transaction did succeed: its genuine notification was (or will be) a duplicate of the forgery's key.
      expect(recorder.names().filter((name) => name !== 'notification')).toEqual(['rejected', 'successful']);
      expect(recorder.of('successful')[0]).toMatchObject({
        amount: genuine.amount,
        custom_data: genuine.custom_data,
      });
      expect((await post(genuine)).status).toBe(200);
      await settle();
      expect(recorder.count('successful')).toBe(1);
    },
  );

  test.each([['state', { state: 'FAILED' }, ['state']]])(
    'a notification whose %s differs from the service record is rejected with both records, and nothing is emitted',
    async (_field, change, mismatches) => {
      const genuine = uniquePayload();
      const fake = fakeSource({ [genuine.transaction_id as string]: genuine });
      const { recorder, post } = await start({ verify: fake.source });

      await post({ ...genuine, ...change });
      await until(() => recorder.count('rejected') === 1, 'the rejected event');
      const [event] = recorder.of('rejected');
      expect(event).toMatchObject({ reason: 'mismatch', mismatches });
      expect(event.status).toMatchObject({ transaction_id: genuine.transaction_id, amount: genuine.amount });
      expect(event.notification).toMatchObject(change);
      expect(recorder.count('successful') + recorder.count('failed')).toBe(0);
    },
  );

  test('after a forgery is rejected, the genuine notification of the same id and state is still emitted', async () => {
    const genuine = uniquePayload();
    const fake = fakeSource({ [genuine.transaction_id as string]: genuine });
    const { recorder, post } = await start({ verify: fake.source });

    await post({ ...genuine, custom_data: 'forged-order' });
    await until(() => recorder.count('rejected') === 1, 'the rejected event');
    await post(genuine);
    await until(() => recorder.count('successful') === 1, 'the successful event');
    expect(recorder.of('successful')[0].custom_data).toBe(genuine.custom_data);
  });

  test('a genuine copy that arrives while a forgery of the same key is being verified is verified next', async () => {
    const genuine = uniquePayload();
    const fake = fakeSource({ [genuine.transaction_id as string]: genuine });
    const { recorder, post } = await start({ verify: fake.source });
    const open = fake.hold();

    await post({ ...genuine, custom_data: 'forged-order' });
    // Its key is held by the forgery, whose fate is not decided: 503, so that the service resends it.
    const early = await post(genuine);
    expect(early.status).toBe(503);
    expect(await early.json()).toMatchObject({ error: 'verification_pending' });
    open();

    await until(() => recorder.count('successful') === 1, 'the successful event');
    expect(recorder.count('rejected')).toBe(1);
    expect(recorder.of('successful')[0].custom_data).toBe(genuine.custom_data);
    // The service's resend, once the key is credited (the service's record in the forgery's place).
    const resend = await post(genuine);
    expect(await resend.json()).toEqual({ ok: true, duplicate: true });
    expect(recorder.count('successful')).toBe(1);
  });

  test('a burst of resends costs one status query and emits one event', async () => {
    const payload = uniquePayload();
    const fake = fakeSource({ [payload.transaction_id as string]: payload });
    const { recorder, post } = await start({ verify: fake.source });

    const answers = await Promise.all(Array.from({ length: 15 }, () => post(payload)));
    expect(answers.map((answer) => answer.status)).toEqual(Array(15).fill(200));
    await until(() => recorder.count('successful') === 1, 'the successful event');
    expect(recorder.count('duplicate')).toBe(14);
    expect(fake.calls).toHaveLength(1);
  });

  test('a verification that cannot be made now is retried, then the notification is emitted', async () => {
    const payload = uniquePayload();
    const fake = fakeSource({ [payload.transaction_id as string]: payload });
    fake.failWith(new StatusRateLimitError(payload.transaction_id as string, 'budget', 1));
    const { recorder, post } = await start({ verify: fake.source, verifyAttempts: 5 });

    await post(payload);
    await until(() => fake.calls.length === 2, 'a second attempt');
    fake.failWith(undefined);
    await until(() => recorder.count('successful') === 1, 'the successful event');
    expect(recorder.count('error')).toBe(0);
    expect(fake.calls.length).toBeGreaterThanOrEqual(3);
  });

  test('when verification keeps failing, error carries the notification after verifyAttempts, and a resend is processed anew', async () => {
    const payload = uniquePayload();
    const fake = fakeSource({ [payload.transaction_id as string]: payload });
    const down = new StatusQueryError(payload.transaction_id as string, 'no answer', { retryable: true });
    fake.failWith(down);
    const { recorder, post } = await start({ verify: fake.source, verifyAttempts: 3 });

    await post(payload);
    await until(() => recorder.count('error') === 1, 'the error event');
    const [event] = recorder.of('error');
    expect(event.error).toBeInstanceOf(VerificationError);
    expect(event.error.code).toBe('IPN_VERIFY_UNAVAILABLE');
    expect(event.error.cause).toBe(down);
    expect(event.notification).toMatchObject({ transaction_id: payload.transaction_id });
    expect(fake.calls).toHaveLength(3);
    expect(recorder.count('successful')).toBe(0);

    fake.failWith(undefined);
    const resend = await post(payload);
    expect(await resend.json()).toEqual({ ok: true });
    await until(() => recorder.count('successful') === 1, 'the successful event');
  });

  test('a state that stays non-final through every attempt is rejected as not_final', async () => {
    const payload = uniquePayload();
    const fake = fakeSource({ [payload.transaction_id as string]: { ...payload, state: 'PENDING1' } });
    const { recorder, post } = await start({ verify: fake.source, verifyAttempts: 2 });

    await post(payload);
    await until(() => recorder.count('rejected') === 1, 'the rejected event');
    expect(recorder.of('rejected')[0]).toMatchObject({
      reason: 'not_final',
      mismatches: ['state'],
      status: { state: 'PENDING1' },
    });
    expect(recorder.count('successful')).toBe(0);
  });

  test('close() stops pending verification retries and reports the notification it could not verify', async () => {
    const payload = uniquePayload();
    const fake = fakeSource({ [payload.transaction_id as string]: payload });
    fake.failWith(new StatusQueryError(payload.transaction_id as string, 'down', { retryable: true }));
    const { ipn, recorder, post } = await start({
      verify: fake.source,
      verifyAttempts: 3,
      verifyRetryDelayMs: 50,
    });

    await post(payload);
    await until(() => fake.calls.length === 1, 'the first attempt');
    await ipn.close();
    expect(recorder.of('error')).toEqual([
      expect.objectContaining({
        error: expect.objectContaining({ code: 'IPN_VERIFY_UNAVAILABLE' }),
        notification: expect.objectContaining({ transaction_id: payload.transaction_id }),
      }),
    ]);
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(fake.calls).toHaveLength(1);
    expect(recorder.count('error')).toBe(1);
    expect(recorder.count('successful')).toBe(0);
  });
});

describe('after ipn.close()', () => {
  const keyOf = (payload: Record<string, unknown>) => `${String(payload.transaction_id)}:SUCCESSFUL`;

  test('a notification is answered 503 with Retry-After and a JSON body; nothing is claimed, nobody is asked', async () => {
    const payload = uniquePayload();
    const fake = fakeSource({ [payload.transaction_id as string]: payload });
    const store = new MemoryStore();
    const { ipn, recorder, post } = await start({ verify: fake.source, store });
    await ipn.close();

    const response = await post(payload);

    expect(response.status).toBe(503);
    expect(response.headers.get('retry-after')).toBe('30');
    expect(response.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await response.json()).toEqual({
      error: 'closed',
      message: 'the IPN router is closed (the app is shutting down): resend it later',
    });
    await settle();
    expect(fake.calls).toEqual([]);
    expect(recorder.events).toEqual([]);
    expect(store.claim(keyOf(payload), 60_000)).toBe(true); // the key was never taken
  });

  test('a claim in flight when close() is called is undone and answered 503, so the resend is delivered', async () => {
    const payload = uniquePayload();
    const fake = fakeSource({ [payload.transaction_id as string]: payload });
    const inner = new MemoryStore();
    let open = () => {};
    let claiming = false;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const store = {
      claim: async (key: string, ttl: number) => {
        claiming = true;
        await gate;
        return inner.claim(key, ttl);
      },
      release: (key: string) => inner.release(key),
    };
    const { ipn, recorder, post } = await start({ verify: fake.source, store });

    const answer = post(payload);
    await until(() => claiming, 'the claim');
    const closing = ipn.close();
    open();

    expect((await answer).status).toBe(503);
    await closing;
    expect(fake.calls).toEqual([]);
    expect(recorder.count('successful')).toBe(0);
    expect(inner.claim(keyOf(payload), 60_000)).toBe(true); // released: the resend is not a duplicate
  });

  test('a store close() that never settles is reported after storeTimeoutMs, and ipn.close() resolves', async () => {
    const store = {
      ...new MemoryStore(),
      claim: () => true,
      release: () => {},
      close: () => new Promise<void>(() => {}),
    };
    const { ipn, recorder } = await start({ store, storeTimeoutMs: 50 });

    await ipn.close();

    expect(recorder.of('error')).toEqual([
      {
        error: expect.objectContaining({
          code: 'IPN_STORE_FAILED',
          message: "the store's close() did not settle within 50 ms (storeTimeoutMs)",
        }),
      },
    ]);
  });

  test('a store close() that rejects is reported as an error event, and ipn.close() resolves', async () => {
    const store = {
      claim: () => true,
      release: () => {},
      close: () => Promise.reject(new Error('connection already closed')),
    };
    const { ipn, recorder } = await start({ store });

    await expect(ipn.close()).resolves.toBeUndefined();

    expect(recorder.of('error')).toEqual([
      {
        error: expect.objectContaining({
          code: 'IPN_STORE_FAILED',
          message: "the store's close() failed: connection already closed",
        }),
      },
    ]);
  });
});

describe('a verify source that never settles', () => {
  test('holds no notification forever: each query times out (verifyTimeoutMs), and after verifyAttempts it is reported', async () => {
    const payload = uniquePayload();
    const calls: string[] = [];
    const source: StatusSource = {
      getStatus: (id) => {
        calls.push(id);
        return new Promise(() => {});
      },
    };
    const { recorder, post } = await start({ verify: source, verifyTimeoutMs: 20, verifyAttempts: 2 });

    expect((await post(payload)).status).toBe(200);

    await until(() => recorder.count('error') === 1, 'the error event');
    const [{ error, notification }] = recorder.of('error');
    expect(error).toMatchObject({ code: 'IPN_VERIFY_UNAVAILABLE' });
    expect(error.message).toContain('did not answer about');
    expect(error.cause).toMatchObject({ code: 'IPN_STATUS_QUERY_FAILED', retryable: true });
    expect(notification).toMatchObject({ transaction_id: payload.transaction_id });
    expect(calls).toHaveLength(2);
    expect(recorder.count('successful')).toBe(0);
  });
});

describe('ipnRouter({ verify, maxPendingVerifications })', () => {
  test('past the bound, a new notification is answered 503 with Retry-After, unclaimed, and reported', async () => {
    const payloads = [uniquePayload(), uniquePayload(), uniquePayload()];
    const fake = fakeSource(Object.fromEntries(payloads.map((p) => [String(p.transaction_id), p])));
    const { ipn, recorder, post } = await start({ verify: fake.source, maxPendingVerifications: 2 });
    const open = fake.hold();
    const [first, second, third] = payloads as [Record<string, unknown>, ...Array<Record<string, unknown>>];

    expect((await post(first)).status).toBe(200);
    expect((await post(second)).status).toBe(200);
    const shed = await post(third);
    expect(shed.status).toBe(503);
    expect(shed.headers.get('retry-after')).toBe('30');
    expect(await shed.json()).toMatchObject({ error: 'verification_busy' });
    await until(() => recorder.count('error') === 1, 'the error event');
    expect(recorder.of('error')[0]).toMatchObject({
      error: { code: 'IPN_VERIFY_BUSY', name: 'VerificationBusyError' },
      notification: { transaction_id: third?.transaction_id },
    });
    expect(ipn.metrics().verificationsShed).toBe(1);
    expect(fake.calls).toHaveLength(2); // the shed one cost no status query

    open();
    await until(() => recorder.count('successful') === 2, 'the first two');
    // Its key was never claimed: the service's resend is processed, once.
    const resend = await post(third);
    expect(await resend.json()).toEqual({ ok: true });
    await until(() => recorder.count('successful') === 3, 'the resend');
    expect(recorder.of('successful').map((n) => n.transaction_id)).toEqual(
      payloads.map((p) => p.transaction_id),
    );
  });

  test('a resend after verification is a duplicate (200), never shed', async () => {
    const payload = uniquePayload();
    const fake = fakeSource({ [String(payload.transaction_id)]: payload });
    const { recorder, post } = await start({ verify: fake.source, maxPendingVerifications: 1 });
    const open = fake.hold();
    expect((await post(payload)).status).toBe(200);
    open();
    await until(() => recorder.count('successful') === 1, 'the successful event');
    const resend = await post(payload);
    expect(await resend.json()).toEqual({ ok: true, duplicate: true });
    expect(recorder.count('error')).toBe(0);
  });
});

describe('ipn.reconcile()', () => {
  test('delivers a final record that never arrived, and the late notification is then a duplicate', async () => {
    const payload = uniquePayload();
    const fake = fakeSource({ [payload.transaction_id as string]: payload });
    const { ipn, recorder, post } = await start({ verify: fake.source });

    const result = await ipn.reconcile(payload.transaction_id as string);
    expect(result.emitted).toBe(true);
    expect(result.record).toMatchObject({ transaction_id: payload.transaction_id, state: 'SUCCESSFUL' });
    expect(recorder.count('successful')).toBe(1);

    const late = await post(payload);
    expect(await late.json()).toEqual({ ok: true, duplicate: true });
    expect((await ipn.reconcile(payload.transaction_id as string)).emitted).toBe(false);
    expect(recorder.count('successful')).toBe(1);
  });

  test('a non-final state is returned and nothing is emitted', async () => {
    const payload = uniquePayload();
    const fake = fakeSource({ [payload.transaction_id as string]: { ...payload, state: 'PENDING1' } });
    const { ipn, recorder } = await start({ verify: fake.source });

    const result = await ipn.reconcile(payload.transaction_id as string);
    expect(result).toMatchObject({ emitted: false, record: { state: 'PENDING1' } });
    expect(recorder.events).toHaveLength(0);
  });

  test('an unknown id rejects with TransactionNotFoundError', async () => {
    const { ipn } = await start({ verify: fakeSource().source });
    await expect(ipn.reconcile('EFB.404404')).rejects.toBeInstanceOf(TransactionNotFoundError);
  });

  test('without a status client it rejects with IPN_NO_STATUS_CLIENT', async () => {
    const { ipn } = await start({});
    await expect(ipn.reconcile('EFB.001158')).rejects.toMatchObject({ code: 'IPN_NO_STATUS_CLIENT' });
  });
});
