import { MemoryStore, ipnRouter, type Store } from '../../lib/index.js';
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
