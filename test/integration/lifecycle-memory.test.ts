import {
  createStatusClient,
  MemoryStore,
  ipnRouter,
  type ConflictEvent,
  type Store,
} from '../../lib/index.js';
import { createFakeProvider, type FakeProvider } from '../../lib/testing.js';
import { quiet } from '../helpers/quiet-logger.js';
import { until } from '../helpers/until.js';
import { lifecycleScenarios } from '../helpers/lifecycle-scenarios.js';

/** One MemoryStore is one process's: its "instances" share the one object. */
const shared = new MemoryStore();
describe('MemoryStore', () => {
  lifecycleScenarios({ store: () => shared });
});

/** A custom store without a lifecycle: the router keeps the states in its own memory, and says so. */
describe('a custom store without a lifecycle', () => {
  test('the router warns once at start, and still emits conflict for a FAILED after a SUCCESSFUL it accepted', async () => {
    const inner = new MemoryStore();
    const store: Store = {
      claim: (k, t) => inner.claim(k, t),
      release: (k) => inner.release(k),
    };
    const warnings: string[] = [];
    const logger = {
      debug() {},
      info() {},
      error() {},
      warn: (_: unknown, message: string) => void warnings.push(message),
    };
    const ipn = ipnRouter({ store, logger });
    expect(warnings.filter((w) => w.includes('store.lifecycle'))).toHaveLength(1);
    const conflicts: unknown[] = [];
    const failed: unknown[] = [];
    ipn.on('conflict', (e) => void conflicts.push(e));
    ipn.on('failed', (n) => void failed.push(n));
    ipn.on('successful', () => {});
    const post = (state: string) =>
      ipn.fetch(
        new Request('https://shop.example/ipn', {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ transaction_id: 'CUS.000001', state, amount: 100 }),
        }),
      );
    expect((await post('SUCCESSFUL')).status).toBe(200);
    expect((await post('FAILED')).status).toBe(200);
    await new Promise((resolve) => setImmediate(resolve));
    expect(conflicts).toHaveLength(1);
    expect(failed).toHaveLength(0);
    await ipn.close();
  });
});

/** With a status client, the conflict carries what one status query says now, made after the 200. */
describe('a conflict with a status client', () => {
  let provider: FakeProvider;
  beforeAll(async () => {
    provider = await createFakeProvider({ apiKey: 'test-key' });
  });
  afterAll(async () => provider.close());

  test('the conflict event carries the status the service gives now, from one query', async () => {
    const { transactionId } = provider.initiate({
      amount: 2500,
      ipnUrl: 'http://127.0.0.1:9/unused',
      customData: 'order-7',
      outcome: 'SUCCESSFUL',
      deliver: false,
    });
    provider.setState(transactionId, 'FAILED'); // the service turned it around
    const ipn = ipnRouter({
      store: new MemoryStore(),
      logger: quiet,
      statusClient: createStatusClient({ baseUrl: provider.statusBaseUrl, apiKey: 'test-key' }),
    });
    const conflicts: ConflictEvent[] = [];
    ipn.on('conflict', (event) => void conflicts.push(event));
    ipn.on('successful', () => {});
    ipn.on('failed', () => {});
    const post = (state: string) =>
      ipn.fetch(
        new Request('https://shop.example/ipn', {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            transaction_id: transactionId,
            state,
            amount: 2500,
            custom_data: 'order-7',
          }),
        }),
      );
    expect((await post('SUCCESSFUL')).status).toBe(200);
    expect((await post('FAILED')).status).toBe(200);
    await until(() => conflicts.length === 1, 'the conflict');
    expect(conflicts[0]?.status?.state).toBe('FAILED');
    expect(conflicts[0]?.message).toMatch(/the status query says FAILED now/);
    expect(provider.statusQueriesFor(transactionId)).toBe(1);
    await ipn.close();
  });
});
