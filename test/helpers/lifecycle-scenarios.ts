import { createStatusClient, ipnRouter, type IpnRouter, type Store } from '../../lib/index.js';
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
