import {
  createStatusClient,
  ipnRouter,
  StoreError,
  type IpnRouter,
  type LifecycleStore,
  type Store,
} from '../../lib/index.js';
import { createFakeProvider, type FakeProvider } from '../../lib/testing.js';
import { quiet } from './quiet-logger.js';
import { recordEvents } from './record-events.js';
import { failedPayload, successfulPayload } from './payloads.js';
import { until } from './until.js';

/** What a scenario needs of a store: a new object over the same backend at each call, and cleanup. */
export interface LifecycleBackend {
  /** A new store object over the backend (two of them are two instances sharing it). */
  store(): Store;
  /** Runs once before the scenarios (a migrate()). */
  ready?(): Promise<void>;
  close?(): Promise<void>;
}

type Mode = 'at-most-once' | 'at-least-once';
type Router = IpnRouter<any>;

let sequence = 0;
/** A transaction id no other test (nor process) uses. */
export const freshId = (): string => {
  sequence += 1;
  return `LFC.${process.pid}${Date.now() % 100_000}${String(sequence).padStart(5, '0')}`;
};

/** A router over `store`, with listeners that succeed, recording every event. */
export function lifecycleRouter(store: Store, delivery: Mode, options: object = {}) {
  const ipn: Router = ipnRouter({
    store,
    delivery,
    logger: quiet,
    retryDelayMs: 10,
    recoveryIntervalMs: 60_000,
    ...options,
  } as never);
  ipn.on('successful', () => {});
  ipn.on('failed', () => {});
  const recorder = recordEvents(ipn);
  const post = async (body: object): Promise<number> => {
    const response = await ipn.fetch(
      new Request('https://shop.example/ipn', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      }),
    );
    return response.status;
  };
  return { ipn, recorder, post };
}

const payloads = (id: string) => ({
  successful: successfulPayload({ transaction_id: id }),
  failed: failedPayload({ transaction_id: id }),
});

/** The lifecycle's rules through real routers over `backend`, at most once and at least once. */
export function lifecycleScenarios(
  backend: LifecycleBackend,
  modes: Mode[] = ['at-most-once', 'at-least-once'],
) {
  const routers: Router[] = [];
  const open = (delivery: Mode, options?: object) => {
    const made = lifecycleRouter(backend.store(), delivery, options);
    routers.push(made.ipn);
    return made;
  };
  /** The fake payment service, as `verify`'s status service. */
  let provider: FakeProvider;
  beforeAll(async () => {
    provider = await createFakeProvider({ apiKey: 'lifecycle-key' });
    await backend.ready?.();
  });
  afterEach(async () => {
    await Promise.all(routers.splice(0).map((ipn) => ipn.close()));
  });
  afterAll(async () => {
    await provider.close();
    await backend.close?.();
  });
  /** A transaction the service ended in `state`, never notified by it: the tests post its notifications. */
  const transaction = (state: 'SUCCESSFUL' | 'FAILED') => {
    const id = freshId();
    provider.initiate({
      transactionId: id,
      amount: 2500,
      customData: 'order-7',
      ipnUrl: 'http://127.0.0.1:9/unused',
      outcome: state,
      deliver: false,
    });
    provider.setState(id, state);
    const body = (posted: 'SUCCESSFUL' | 'FAILED') =>
      (posted === 'SUCCESSFUL' ? successfulPayload : failedPayload)({
        transaction_id: id,
        amount: 2500,
        custom_data: 'order-7',
      });
    return { id, successful: body('SUCCESSFUL'), failed: body('FAILED') };
  };
  const verifying = () => ({
    verify: createStatusClient({ baseUrl: provider.statusBaseUrl, apiKey: 'lifecycle-key' }),
  });

  describe.each(modes)('%s', (delivery) => {
    test('a FAILED after an accepted SUCCESSFUL is answered 200 and emitted as conflict, never as failed', async () => {
      const { recorder, post, ipn } = open(delivery);
      const id = freshId();
      const { successful, failed } = payloads(id);
      expect(await post(successful)).toBe(200);
      await until(() => recorder.count('successful') === 1, 'successful');
      expect(await post(failed)).toBe(200);
      await until(() => recorder.count('conflict') === 1, 'conflict');
      expect(recorder.count('failed')).toBe(0);
      expect(recorder.of('notification').map((n: { state: string }) => n.state)).toEqual(['SUCCESSFUL']);
      const [event] = recorder.of('conflict');
      expect(event).toMatchObject({
        accepted: 'SUCCESSFUL',
        notification: { transaction_id: id, state: 'FAILED' },
      });
      expect(event.status).toBeUndefined(); // no status client here
      expect(ipn.metrics().conflicts).toBe(1);
      // The service's resend of it is a duplicate: one conflict, one warning.
      expect(await post(failed)).toBe(200);
      await until(() => recorder.count('duplicate') === 1, 'duplicate');
      expect(recorder.count('conflict')).toBe(1);
      if (delivery === 'at-least-once') {
        const entry = await ipn.inbox.get(`${id}:FAILED`);
        expect(entry?.status).toBe('dead');
        expect(entry?.lastError).toMatch(/^conflict: /);
        // A replay decides it again: a conflict again, never failed.
        expect(await ipn.inbox.replay(`${id}:FAILED`)).toBe(true);
        await ipn.drain();
        await until(() => recorder.count('conflict') === 2, 'the replay');
        expect(recorder.count('failed')).toBe(0);
        expect((await ipn.inbox.get(`${id}:FAILED`))?.status).toBe('dead');
      }
    });

    // With `verify`, only a verified notification is decided by the lifecycle: a forgery never touches it.
    test('with verify, a forged SUCCESSFUL of a failed transaction is rejected, and the genuine FAILED after it is failed, not a conflict', async () => {
      const { recorder, post } = open(delivery, verifying());
      const { id, successful, failed } = transaction('FAILED');
      expect(await post(successful)).toBe(200);
      await until(() => recorder.count('rejected') === 1, 'the forgery rejected');
      expect(recorder.of('rejected')[0]).toMatchObject({
        reason: 'mismatch',
        notification: { transaction_id: id, state: 'SUCCESSFUL' },
      });
      expect(await post(failed)).toBe(200);
      await until(() => recorder.count('failed') === 1, 'the genuine FAILED');
      expect(recorder.count('conflict')).toBe(0);
      expect(recorder.count('successful')).toBe(0);
      // The lifecycle holds the FAILED only: the SUCCESSFUL was never accepted.
      expect(await backend.store().lifecycle?.decide(id, 'FAILED', 60_000)).toBe('accepted');
    });

    test('with verify, a forged FAILED of a paid transaction is rejected as forged, never a conflict nor failed', async () => {
      const { recorder, post } = open(delivery, verifying());
      const { id, successful, failed } = transaction('SUCCESSFUL');
      expect(await post(successful)).toBe(200);
      await until(() => recorder.count('successful') === 1, 'the genuine SUCCESSFUL');
      expect(await post(failed)).toBe(200);
      await until(() => recorder.count('rejected') === 1, 'the forgery rejected');
      expect(recorder.of('rejected')[0]).toMatchObject({
        reason: 'mismatch',
        mismatches: ['state'],
        notification: { transaction_id: id, state: 'FAILED' },
      });
      expect(recorder.count('conflict')).toBe(0);
      expect(recorder.count('failed')).toBe(0);
    });

    test('a SUCCESSFUL after a FAILED stays a success, emitted as today', async () => {
      const { recorder, post } = open(delivery);
      const { successful, failed } = payloads(freshId());
      expect(await post(failed)).toBe(200);
      await until(() => recorder.count('failed') === 1, 'failed');
      expect(await post(successful)).toBe(200);
      await until(() => recorder.count('successful') === 1, 'successful');
      expect(recorder.count('conflict')).toBe(0);
    });

    test('the SUCCESSFUL accepted by one instance makes the FAILED at another a conflict', async () => {
      const a = open(delivery);
      const b = open(delivery);
      const { successful, failed } = payloads(freshId());
      expect(await a.post(successful)).toBe(200);
      await until(() => a.recorder.count('successful') === 1, 'successful at a');
      expect(await b.post(failed)).toBe(200);
      await until(() => b.recorder.count('conflict') === 1, 'conflict at b');
      expect(b.recorder.count('failed')).toBe(0);
    });

    test('a FAILED and a SUCCESSFUL at two instances at once: failed then successful, or successful then conflict', async () => {
      const a = open(delivery);
      const b = open(delivery);
      const check = backend.store(); // a third instance, to read the decision afterwards
      const rounds = 40;
      const ids = Array.from({ length: rounds }, freshId);
      await Promise.all(
        ids.map(async (id) => {
          const { successful, failed } = payloads(id);
          const answers = await Promise.all([a.post(failed), b.post(successful)]);
          expect(answers).toEqual([200, 200]);
        }),
      );
      const settled = () => a.recorder.count('failed') + a.recorder.count('conflict') === rounds;
      await until(() => settled() && b.recorder.count('successful') === rounds, 'every decision', 10_000);
      for (const id of ids) {
        const failedOf = a.recorder
          .of('failed')
          .filter((n: { transaction_id: string }) => n.transaction_id === id);
        const conflicts = a.recorder
          .of('conflict')
          .filter((e: { notification: { transaction_id: string } }) => e.notification.transaction_id === id);
        expect(failedOf.length + conflicts.length).toBe(1);
        // Whatever the order was, the SUCCESSFUL is accepted now: a FAILED decided after it is a conflict.
        // A decision made of a read and a separate write lets the FAILED overwrite it, and fails here.
        expect(await check.lifecycle?.decide(id, 'FAILED', 60_000)).toBe('conflict');
      }
    });
  });
}

/** A store's lifecycle whose statements (or scripts) that write the states are counted. */
export interface CountedLifecycle {
  /** The built-in stores' lifecycle: its decisions are promises. */
  lifecycle: { decide(...args: Parameters<LifecycleStore['decide']>): Promise<'accepted' | 'conflict'> };
  /** How many lifecycle writes it has sent so far (one per decision, unbatched). */
  writes(): number;
}

/** What the batching scenarios need of a networked store. */
export interface LifecycleBatchBackend {
  /** A new store over the backend, its lifecycle writes counted. */
  counted(): CountedLifecycle;
  /**
   * A counted lifecycle over a table (or prefix) of its own: `fail()` makes its statements fail (the
   * states table renamed away), `mend()` undoes it.
   */
  breakable(): Promise<CountedLifecycle & { fail(): Promise<void>; mend(): Promise<void> }>;
}

/**
 * Group commit of the lifecycle (`batchedDecide`): the decisions asked while one batch runs go together.
 * The store's batcher sends the first decision at once and queues those asked before it ends, so the
 * decisions asked in one go after it make the next batch: no timing involved.
 */
export function lifecycleBatchScenarios(backend: LifecycleBatchBackend) {
  const ttl = 60_000;

  test('decisions asked while one runs go together: fewer writes than decisions, each verdict right', async () => {
    const { lifecycle, writes } = backend.counted();
    const paid = Array.from({ length: 8 }, freshId);
    for (const id of paid) expect(await lifecycle.decide(id, 'SUCCESSFUL', ttl)).toBe('accepted');
    expect(writes()).toBe(paid.length); // one each, asked one after the other: the count sees them
    const fresh = Array.from({ length: 12 }, freshId);
    const stateOf = (index: number) => (index % 2 === 0 ? 'SUCCESSFUL' : 'FAILED');
    const before = writes();

    const first = lifecycle.decide(freshId(), 'FAILED', ttl);
    const batch = [
      ...paid.map((id) => lifecycle.decide(id, 'FAILED', ttl)),
      ...fresh.map((id, index) => lifecycle.decide(id, stateOf(index), ttl)),
    ];

    expect(await first).toBe('accepted');
    expect(await Promise.all(batch)).toEqual([...paid.map(() => 'conflict'), ...fresh.map(() => 'accepted')]);
    expect(writes() - before).toBeLessThan(1 + batch.length);
    // What the batch recorded: a FAILED after each SUCCESSFUL of it is a conflict, after a FAILED is not.
    const check = backend.counted().lifecycle;
    expect(await Promise.all(fresh.map((id) => check.decide(id, 'FAILED', ttl)))).toEqual(
      fresh.map((_, index) => (stateOf(index) === 'SUCCESSFUL' ? 'conflict' : 'accepted')),
    );
  });

  test('two decisions of one transaction queued together are decided in their order, and SUCCESSFUL is kept', async () => {
    const { lifecycle, writes } = backend.counted();
    const [paidFirst, failedFirst] = [freshId(), freshId()];
    const others = Array.from({ length: 6 }, freshId);
    const before = writes();

    const verdicts = await Promise.all([
      lifecycle.decide(freshId(), 'SUCCESSFUL', ttl), // the batch running while the others queue
      lifecycle.decide(paidFirst, 'SUCCESSFUL', ttl),
      lifecycle.decide(paidFirst, 'FAILED', ttl),
      lifecycle.decide(failedFirst, 'FAILED', ttl),
      lifecycle.decide(failedFirst, 'SUCCESSFUL', ttl),
      ...others.map((id) => lifecycle.decide(id, 'SUCCESSFUL', ttl)),
    ]);

    // SUCCESSFUL then FAILED: the FAILED is a conflict; FAILED then SUCCESSFUL: both accepted.
    expect(verdicts).toEqual([
      'accepted',
      'accepted',
      'conflict',
      'accepted',
      'accepted',
      ...others.map(() => 'accepted'),
    ]);
    expect(writes() - before).toBeLessThan(verdicts.length);
    const check = backend.counted().lifecycle;
    expect(await check.decide(paidFirst, 'FAILED', ttl)).toBe('conflict');
    expect(await check.decide(failedFirst, 'FAILED', ttl)).toBe('conflict');
  });

  // Without the sort of mysql-lifecycle.ts (or the ORDER BY of postgres-lifecycle.ts), many of these
  // decisions fail with a deadlock.
  test('instances whose batches take one set of rows in different orders never deadlock: the rows go in id order', async () => {
    const instances = Array.from({ length: 4 }, () => backend.counted().lifecycle);
    for (let round = 0; round < 3; round += 1) {
      const ids = Array.from({ length: 100 }, freshId);
      const orders = [ids, [...ids].reverse(), [...ids.slice(50), ...ids.slice(0, 50)], [...ids].reverse()];
      const results = await Promise.allSettled(
        instances.flatMap((lifecycle, index) =>
          orders[index]!.map((id) => lifecycle.decide(id, index === 3 ? 'SUCCESSFUL' : 'FAILED', ttl)),
        ),
      );
      expect(results.filter(({ status }) => status === 'rejected')).toEqual([]);
      const check = backend.counted().lifecycle;
      expect(await Promise.all(ids.map((id) => check.decide(id, 'FAILED', ttl)))).toEqual(
        ids.map(() => 'conflict'),
      );
    }
  });

  test('a batch whose statement fails rejects each of its decisions with a StoreError; the next decision works', async () => {
    const { lifecycle, writes, fail, mend } = await backend.breakable();
    await fail();
    const ids = Array.from({ length: 10 }, freshId);
    const before = writes();

    const results = await Promise.allSettled(ids.map((id) => lifecycle.decide(id, 'SUCCESSFUL', ttl)));

    for (const result of results) {
      expect(result.status).toBe('rejected');
      expect((result as PromiseRejectedResult).reason).toBeInstanceOf(StoreError);
    }
    expect(writes() - before).toBeLessThan(ids.length);
    await mend();
    expect(await lifecycle.decide(ids[1]!, 'SUCCESSFUL', ttl)).toBe('accepted');
    expect(await lifecycle.decide(ids[1]!, 'FAILED', ttl)).toBe('conflict');
    expect(await lifecycle.decide(ids[2]!, 'FAILED', ttl)).toBe('accepted');
  });
}
