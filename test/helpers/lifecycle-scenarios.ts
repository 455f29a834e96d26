import { ipnRouter, type IpnRouter, type Store } from '../../lib/index.js';
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
export function lifecycleRouter(store: Store, delivery: Mode) {
  const ipn: Router = ipnRouter({
    store,
    delivery,
    logger: quiet,
    retryDelayMs: 10,
    recoveryIntervalMs: 60_000,
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
  const open = (delivery: Mode) => {
    const made = lifecycleRouter(backend.store(), delivery);
    routers.push(made.ipn);
    return made;
  };
  beforeAll(async () => backend.ready?.());
  afterEach(async () => {
    await Promise.all(routers.splice(0).map((ipn) => ipn.close()));
  });
  afterAll(async () => backend.close?.());

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
