import { MemoryStore, type Store } from '../../../lib/index.js';
import { runStoreConformance } from '../../../lib/testing.js';

type State = 'SUCCESSFUL' | 'FAILED';

/** A MemoryStore whose lifecycle is `decide`, shared by every store the runner makes (one database). */
function storeWith(decide: (id: string, state: State) => Promise<'accepted' | 'conflict'>): () => Store {
  return () => {
    const store = new MemoryStore();
    Object.defineProperty(store, 'lifecycle', { value: { decide } });
    return store;
  };
}

const lifecycleFailures = (failures: Array<{ rule: string }>) =>
  failures.filter((failure) => failure.rule.startsWith('lifecycle-')).map((failure) => failure.rule);

describe('runStoreConformance: the lifecycle rules', () => {
  test('an atomic lifecycle passes them', async () => {
    const states = new Map<string, State>();
    const decide = async (id: string, state: State) => {
      await Promise.resolve(); // a network hop, before one atomic step
      const prior = states.get(id);
      if (prior !== 'SUCCESSFUL') states.set(id, state);
      return state === 'FAILED' && prior === 'SUCCESSFUL' ? 'conflict' : 'accepted';
    };
    const result = await runStoreConformance(storeWith(decide), {
      durable: false,
      skip: ['claim-token-idempotent'],
    });
    expect(lifecycleFailures(result.failures)).toEqual([]);
    expect(result.passed).toEqual(expect.arrayContaining(['lifecycle-decide', 'lifecycle-atomic']));
  });

  test('a lifecycle that reads, then writes in a second step, fails lifecycle-atomic', async () => {
    const states = new Map<string, State>();
    const decide = async (id: string, state: State) => {
      const prior = states.get(id);
      await new Promise((resolve) => setTimeout(resolve, Math.random() * 4)); // the second round trip
      if (prior !== 'SUCCESSFUL') states.set(id, state); // right alone, wrong when a SUCCESSFUL came meanwhile
      return state === 'FAILED' && prior === 'SUCCESSFUL' ? 'conflict' : 'accepted';
    };
    const result = await runStoreConformance(storeWith(decide), {
      durable: false,
      skip: ['claim-token-idempotent'],
    });
    expect(lifecycleFailures(result.failures)).toEqual(['lifecycle-atomic']);
  });

  test('a store without a lifecycle skips the rules, saying why', async () => {
    const held = new Set<string>();
    const store: Store = {
      claim: (key) => !held.has(key) && Boolean(held.add(key)),
      release: (key) => void held.delete(key),
    };
    const result = await runStoreConformance(() => store, { skip: ['claim-ttl', 'claim-token-idempotent'] });
    expect(result.skipped).toContainEqual({
      rule: 'lifecycle-atomic',
      reason: 'the store has no lifecycle (optional: the router keeps one in its own memory instead)',
    });
  });
});
