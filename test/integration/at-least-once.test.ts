import { ipnNotificationSchema, ipnRouter, type Options } from '../../lib/index.js';
import type { DeliveryTransaction } from '../../lib/stores/store.js';
import { MemoryInbox } from '../helpers/memory-inbox.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { servedRouters, settle } from '../helpers/servers.js';
import { until } from '../helpers/until.js';

const serve = servedRouters();

async function start(inbox: MemoryInbox, options: Partial<Options> = {}) {
  const ipn = ipnRouter({
    store: inbox,
    delivery: 'at-least-once',
    logger: quiet,
    retryDelayMs: 5,
    recoveryIntervalMs: 20,
    ...options,
  });
  const recorder = recordEvents(ipn);
  const { post } = await serve(ipn);
  return { ipn, recorder, post };
}

const keyOf = (payload: Record<string, unknown>) =>
  `${String(payload.transaction_id)}:${String(payload.state)}`;

describe("ipnRouter({ delivery: 'at-least-once' })", () => {
  test('stores the whole notification before the 200, awaits the listener, then marks it delivered', async () => {
    const inbox = new MemoryInbox();
    const { ipn, post } = await start(inbox);
    let finish = () => {};
    const credited: string[] = [];
    ipn.on('successful', async (n) => {
      await new Promise<void>((resolve) => (finish = resolve));
      credited.push(n.custom_data);
    });
    const payload = uniquePayload();

    const response = await post(payload);
    expect(response.status).toBe(200);
    const stored = await inbox.get(keyOf(payload));
    expect(stored).toMatchObject({ status: 'received', attempts: 1 });
    expect(stored?.record).toMatchObject({
      transaction_id: payload.transaction_id,
      customer_name: payload.customer_name,
    });

    finish();
    await until(() => inbox.entries.get(keyOf(payload))?.status === 'delivered', 'delivered');
    expect(credited).toEqual([payload.custom_data]);
    expect(inbox.entries.get(keyOf(payload))?.deliveredAt).toBeInstanceOf(Date);
  });

  test('a resend of a stored notification is a duplicate: answered 200, nothing stored twice', async () => {
    const inbox = new MemoryInbox();
    const { ipn, recorder, post } = await start(inbox);
    ipn.on('successful', () => {});
    const payload = uniquePayload();
    await post(payload);
    const again = await post(payload);
    expect(await again.json()).toEqual({ ok: true, duplicate: true });
    await until(() => inbox.entries.get(keyOf(payload))?.status === 'delivered', 'delivered');
    expect(recorder.count('successful')).toBe(1);
    expect(recorder.count('duplicate')).toBe(1);
    expect(inbox.entries.size).toBe(1);
  });

  test('a failed delivery is retried with backoff and delivered once the listener succeeds', async () => {
    const inbox = new MemoryInbox();
    const { ipn, recorder, post } = await start(inbox);
    let calls = 0;
    ipn.on('successful', () => {
      calls += 1;
      if (calls < 3) throw new Error(`ledger unavailable (${calls})`);
    });
    const payload = uniquePayload();
    await post(payload);

    await until(() => inbox.entries.get(keyOf(payload))?.status === 'delivered', 'delivered');
    expect(calls).toBe(3);
    expect(inbox.entries.get(keyOf(payload))).toMatchObject({
      attempts: 3,
      lastError: "a listener of 'successful' failed: ledger unavailable (2)",
    });
    // One failed attempt, one error: the listener's own failure is its cause, not a second event.
    const errors = recorder.of('error');
    expect(errors.map((event) => event.error.code)).toEqual(['IPN_DELIVERY_FAILED', 'IPN_DELIVERY_FAILED']);
    expect(errors.map((event) => event.error.message)).toEqual([
      "a listener of 'successful' failed: ledger unavailable (1)",
      "a listener of 'successful' failed: ledger unavailable (2)",
    ]);
    expect(errors[0]!.error.cause).toMatchObject({
      code: 'IPN_LISTENER_FAILED',
      event: 'successful',
      cause: new Error('ledger unavailable (1)'),
    });
    expect(errors[0]!.notification).toMatchObject({ transaction_id: payload.transaction_id });
    expect(recorder.count('dead')).toBe(0);
  });

  test('a retried delivery carries the same extra fields: the inbox keeps them beside the listed ones', async () => {
    const inbox = new MemoryInbox();
    const { ipn, post } = await start(inbox);
    const seen: unknown[] = [];
    ipn.on('successful', (n) => {
      seen.push(n.extra);
      if (seen.length === 1) throw new Error('ledger unavailable');
    });
    const payload = uniquePayload({ currency: 'XOF', transaction_channel: 'wave' });
    await post(payload);

    await until(() => inbox.entries.get(keyOf(payload))?.status === 'delivered', 'delivered');
    const extra = { currency: 'XOF', transaction_channel: 'wave' };
    expect(seen).toEqual([extra, extra]);
    const stored = await inbox.get(keyOf(payload));
    expect(stored?.record).toMatchObject(extra);
    expect(stored?.record).not.toHaveProperty('extra');
  });

  test('after maxAttempts failures the notification is dead and emitted as dead; a replay delivers it', async () => {
    const inbox = new MemoryInbox();
    const { ipn, recorder, post } = await start(inbox, { maxAttempts: 3 });
    let healthy = false;
    ipn.on('failed', () => {
      if (!healthy) return Promise.reject(new Error('refund service down'));
    });
    const payload = uniquePayload({ state: 'FAILED' });
    await post(payload);

    await until(() => recorder.count('dead') === 1, 'the dead event');
    const [dead] = recorder.of('dead');
    expect(dead).toMatchObject({ key: keyOf(payload), attempts: 3, notification: { state: 'FAILED' } });
    expect(dead.lastError).toBe("a listener of 'failed' failed: refund service down");
    expect(inbox.entries.get(keyOf(payload))?.status).toBe('dead');
    await settle();
    expect(inbox.entries.get(keyOf(payload))?.status).toBe('dead'); // not taken up again by itself

    healthy = true;
    expect(await ipn.inbox.replayDead()).toBe(1);
    await until(() => inbox.entries.get(keyOf(payload))?.status === 'delivered', 'delivered after replay');
  });

  test("the listener's own message, redacted as logs are, is the error, the inbox's last error and dead.lastError", async () => {
    const inbox = new MemoryInbox();
    const { ipn, recorder, post } = await start(inbox, { maxAttempts: 1 });
    const payload = uniquePayload();
    ipn.on('successful', (n) => {
      throw new Error(`no account for ${n.customer_name} (${n.destination})`);
    });
    await post(payload);

    await until(() => recorder.count('dead') === 1, 'the dead event');
    const said = "a listener of 'successful' failed: no account for [redacted] ([redacted])";
    expect(recorder.of('dead')[0]!.lastError).toBe(said);
    expect(inbox.entries.get(keyOf(payload))?.lastError).toBe(said);
    expect(recorder.of('error').map((event) => event.error.message)).toEqual([said]);
    // The original stays reachable through the cause, for the partner's own handling.
    expect((recorder.of('error')[0]!.error.cause as Error).message).toContain(String(payload.customer_name));
  });

  test('with logCustomerData, the listener message is kept in clear', async () => {
    const inbox = new MemoryInbox();
    const { ipn, recorder, post } = await start(inbox, { maxAttempts: 1, logCustomerData: true });
    const payload = uniquePayload();
    ipn.on('successful', (n) => Promise.reject(new Error(`no account for ${n.customer_name}`)));
    await post(payload);
    await until(() => recorder.count('dead') === 1, 'the dead event');
    expect(recorder.of('dead')[0]!.lastError).toBe(
      `a listener of 'successful' failed: no account for ${String(payload.customer_name)}`,
    );
  });

  test('dead is emitted only by the instance that still held the lease', async () => {
    // A replay or another instance took the entry meanwhile: this attempt's verdict no longer counts.
    class LostLease extends MemoryInbox {
      override async settle(): Promise<boolean> {
        await Promise.resolve();
        return false;
      }
    }
    const inbox = new LostLease();
    const { ipn, recorder, post } = await start(inbox, { maxAttempts: 1 });
    ipn.on('successful', () => Promise.reject(new Error('ledger down')));
    await post(uniquePayload());
    await until(() => recorder.count('error') >= 1, 'the failed attempt');
    await settle();
    expect(recorder.count('dead')).toBe(0);
  });

  test('with no listener at all, nothing counts as delivered', async () => {
    const inbox = new MemoryInbox();
    const ipn = ipnRouter({ store: inbox, delivery: 'at-least-once', logger: quiet, maxAttempts: 1 });
    const errors: string[] = [];
    let dead = 0;
    ipn.on('error', ({ error }) => void errors.push(error.message)).on('dead', () => void (dead += 1));
    const { post } = await serve(ipn);
    const payload = uniquePayload();
    const response = await post(payload);
    expect(response.status).toBe(200);
    await until(() => dead === 1, 'the dead event');
    expect(errors).toEqual([expect.stringMatching(/no listener/)]);
    expect(inbox.entries.get(keyOf(payload))?.status).toBe('dead');
  });

  test('a listener that never settles fails the attempt when the lease runs out', async () => {
    const inbox = new MemoryInbox();
    const { ipn, recorder, post } = await start(inbox, { leaseMs: 100, maxAttempts: 1 });
    ipn.on('successful', () => new Promise(() => {}));
    await post(uniquePayload());
    await until(() => recorder.count('dead') === 1, 'the dead event');
    expect(recorder.of('error')[0].error.message).toMatch(/did not settle within 90 ms/);
  });

  test('a notification left received by a process that died is taken up and delivered', async () => {
    const inbox = new MemoryInbox();
    const payload = uniquePayload();
    // What a crashed instance leaves: stored, leased to it, never settled; its lease has run out.
    await inbox.receive(keyOf(payload), payload, { id: 'dead-process', ms: 1 });
    await new Promise((resolve) => setTimeout(resolve, 5));
    const { ipn } = await start(inbox);
    const credited: string[] = [];
    ipn.on('successful', (n) => void credited.push(n.transaction_id));

    await until(() => inbox.entries.get(keyOf(payload))?.status === 'delivered', 'delivered by recovery');
    expect(credited).toEqual([payload.transaction_id]);
    expect(inbox.entries.get(keyOf(payload))?.attempts).toBe(2);
  });

  test('when the store cannot record the notification, the answer is 503 with Retry-After and nothing is emitted', async () => {
    const inbox = new MemoryInbox();
    const { ipn, recorder, post } = await start(inbox);
    ipn.on('successful', () => {});
    inbox.failNext('receive');
    const payload = uniquePayload();

    const refused = await post(payload);
    expect(refused.status).toBe(503);
    expect(refused.headers.get('retry-after')).toBe('30');
    await settle();
    expect(recorder.of('error')[0].error.code).toBe('IPN_STORE_FAILED');
    expect(recorder.count('successful')).toBe(0);

    expect((await post(payload)).status).toBe(200); // the service's resend
    await until(() => recorder.count('successful') === 1, 'the successful event');
  });

  test('with verify, a forgery that took the key first is rejected and the genuine record delivered in its place', async () => {
    const genuine = uniquePayload();
    const source = { getStatus: () => Promise.resolve(ipnNotificationSchema.parse(genuine)) };
    let open = () => {};
    const gate = new Promise<void>((resolve) => (open = resolve));
    const slow = { getStatus: async () => (await gate, source.getStatus()) };
    const inbox = new MemoryInbox();
    const { ipn, recorder, post } = await start(inbox, { verify: slow });
    const credited: string[] = [];
    ipn.on('successful', (n) => void credited.push(n.custom_data));

    await post({ ...genuine, custom_data: 'forger-order', amount: 1 });
    expect(await (await post(genuine)).json()).toEqual({ ok: true, duplicate: true }); // the service stops here
    open();

    await until(() => inbox.entries.get(keyOf(genuine))?.status === 'delivered', 'delivered');
    expect(recorder.of('rejected')).toEqual([expect.objectContaining({ reason: 'mismatch' })]);
    expect(credited).toEqual([genuine.custom_data]);
    expect(inbox.entries.get(keyOf(genuine))?.record).toMatchObject({ custom_data: genuine.custom_data });
  });

  test('a failed replacement of a forgery leaves the forgery in the inbox, never nothing, and the genuine record is delivered later', async () => {
    const genuine = uniquePayload();
    let open = () => {};
    const gate = new Promise<void>((resolve) => (open = resolve));
    const verify = {
      getStatus: async () => (await gate, ipnNotificationSchema.parse(genuine)),
    };
    const inbox = new MemoryInbox();
    const { ipn, recorder, post } = await start(inbox, { verify, leaseMs: 500 });
    const credited: string[] = [];
    ipn.on('successful', (n) => void credited.push(n.custom_data));

    await post({ ...genuine, custom_data: 'forger-order', amount: 1 });
    expect(await (await post(genuine)).json()).toEqual({ ok: true, duplicate: true });
    inbox.failNext('replace');
    open();

    await until(() => recorder.count('error') === 1, 'the failed replacement');
    expect(recorder.of('error')[0]!.error).toMatchObject({ code: 'IPN_STORE_FAILED' });
    expect(inbox.entries.get(keyOf(genuine))).toMatchObject({ record: { custom_data: 'forger-order' } });

    // Its lease runs out, recovery verifies it again, and the replacement goes through this time.
    await until(() => inbox.entries.get(keyOf(genuine))?.status === 'delivered', 'delivered');
    expect(credited).toEqual([genuine.custom_data]);
    expect(inbox.entries.get(keyOf(genuine))?.record).toMatchObject({ custom_data: genuine.custom_data });
  });

  test('a store lease() that never settles is reported as a timeout, and the next recovery round runs', async () => {
    class HangingLease extends MemoryInbox {
      hangs = 0;
      override lease(...args: Parameters<MemoryInbox['lease']>) {
        if (this.hangs > 0) {
          this.hangs -= 1;
          return new Promise<never>(() => {});
        }
        return super.lease(...args);
      }
    }
    const inbox = new HangingLease();
    const payload = uniquePayload();
    // A notification due for a retry, as a failed first attempt leaves it.
    await inbox.receive(keyOf(payload), payload, { id: 'earlier-attempt', ms: 1 });
    await inbox.settle(keyOf(payload), 'earlier-attempt', {
      status: 'failed',
      error: 'ledger down',
      nextAttemptAt: new Date(),
    });
    inbox.hangs = 1;
    const { ipn, recorder } = await start(inbox, { storeTimeoutMs: 50 });
    const credited: string[] = [];
    ipn.on('successful', (n) => void credited.push(n.transaction_id));

    await until(
      () => inbox.entries.get(keyOf(payload))?.status === 'delivered',
      'delivered by a later round',
    );
    expect(credited).toEqual([payload.transaction_id]);
    const [timeout] = recorder.of('error');
    expect(timeout!.error).toMatchObject({ code: 'IPN_STORE_FAILED' });
    expect(timeout!.error.message).toMatch(/lease did not answer within 50 ms \(storeTimeoutMs\)/);
  });

  test('a store begin() that never answers is bounded by storeTimeoutMs; the transaction it opens late is closed', async () => {
    const rollbacks: Array<Promise<unknown> | undefined> = [];
    let openLate: (() => void) | undefined;
    class HangingBegin extends MemoryInbox {
      begins = 0;
      begin() {
        this.begins += 1;
        if (this.begins > 1) return Promise.resolve(undefined); // no transaction: settled as usual
        return new Promise<DeliveryTransaction<string>>((resolve) => {
          openLate = () =>
            resolve({
              tx: 'the late client',
              state: 'open',
              commit: () => Promise.reject(new Error('never committed')),
              rollback: (listeners) => {
                rollbacks.push(listeners);
                return Promise.resolve();
              },
            });
        });
      }
    }
    const inbox = new HangingBegin();
    const { ipn, recorder, post } = await start(inbox, { storeTimeoutMs: 50 });
    const seen: unknown[] = [];
    ipn.on('successful', (n, context) => void seen.push(context.tx));
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);

    await until(() => inbox.entries.get(keyOf(payload))?.status === 'delivered', 'delivered');
    expect(inbox.entries.get(keyOf(payload))).toMatchObject({ attempts: 2 });
    expect(seen).toEqual([undefined]); // only the second attempt ran the listener, with no transaction
    expect(recorder.of('error').map((event) => event.error.message)).toEqual([
      `the store's begin for ${keyOf(payload)} did not answer within 50 ms (storeTimeoutMs)`,
    ]);
    openLate!();
    await until(() => rollbacks.length === 1, 'the late transaction closed');
    expect(rollbacks).toEqual([undefined]); // rolled back at once: no listener ran in it
  });

  test('the inbox API lists, shows, replays and purges', async () => {
    const inbox = new MemoryInbox();
    const { ipn, post } = await start(inbox);
    ipn.on('notification', () => {});
    const first = uniquePayload();
    const second = uniquePayload();
    await post(first);
    await post(second);
    await until(() => [...inbox.entries.values()].every((e) => e.status === 'delivered'), 'both delivered');

    expect((await ipn.inbox.list({ status: 'delivered' })).map((entry) => entry.key)).toEqual([
      keyOf(first),
      keyOf(second),
    ]);
    expect(await ipn.inbox.get(keyOf(first))).toMatchObject({ status: 'delivered' });
    expect(await ipn.inbox.replay('EFB.000000:SUCCESSFUL')).toBe(false);
    expect(await ipn.inbox.replay(keyOf(first))).toBe(true);
    await until(
      () =>
        inbox.entries.get(keyOf(first))?.attempts === 1 &&
        inbox.entries.get(keyOf(first))?.status === 'delivered',
      'replayed',
    );
    expect(
      await ipn.inbox.purge(new Date(Date.now() + 1000), 'delivered', { insideDedupeWindow: true }),
    ).toBe(2);
    expect(inbox.entries.size).toBe(0);
  });
});

test('the inbox API of an at-most-once router rejects with IPN_NOT_DURABLE', async () => {
  const ipn = ipnRouter({ logger: quiet });
  await expect(ipn.inbox.list()).rejects.toMatchObject({ code: 'IPN_NOT_DURABLE' });
});

test("delivery 'at-least-once' with a store that only dedupes is a TypeError at construction", () => {
  const dedupeOnly = { claim: () => true, release: () => {} };
  expect(() => ipnRouter({ store: dedupeOnly, delivery: 'at-least-once' })).toThrow(/needs a durable store/);
});
