import { MemoryStore } from '../../../lib/index.js';
import { replayMatching } from '../../../lib/delivery/bulk-replay.js';
import type { DurableStore, ListOptions } from '../../../lib/stores/store.js';

/**
 * A bulk replay lists the entries its filter selects, then replays them one by one: an entry listed as
 * `failed` (or `dead`) that a retry (or another instance's replay) delivers in between must not be made due
 * again, or its listener runs a second time: a second credit.
 */
describe('replayMatching: an entry delivered between the listing and its replay', () => {
  const lease = () => ({ id: `lease-${Math.random()}`, ms: 60_000 });

  async function failedEntry(store: MemoryStore, key: string): Promise<void> {
    const first = lease();
    await store.receive(key, { transaction_id: key.split(':')[0], state: 'SUCCESSFUL' }, first);
    await store.settle(key, first.id, {
      status: 'failed',
      error: 'the database was down',
      nextAttemptAt: new Date(Date.now() + 3_600_000),
    });
  }

  /** The store, whose list() lets `meanwhile` run after the page was read, before anything is replayed. */
  function racing(store: MemoryStore, meanwhile: () => Promise<void>): DurableStore {
    return new Proxy(store, {
      get(target, name) {
        if (name !== 'list') {
          const value = Reflect.get(target, name, target) as unknown;
          return typeof value === 'function'
            ? (value as (...args: unknown[]) => unknown).bind(target)
            : value;
        }
        return async (options: ListOptions) => {
          const page = await target.list(options);
          await meanwhile();
          return page;
        };
      },
    });
  }

  /** The retry that delivers `key` now, as the recovery pass would. */
  const deliveredBy = (store: MemoryStore, key: string) => async () => {
    await store.replay(key); // due now (the retry's time came)
    const retry = lease();
    const taken = await store.lease(retry, 10);
    if (taken.some((entry) => entry.key === key)) await store.settle(key, retry.id, { status: 'delivered' });
  };

  test.each([
    ['a filter with no status', {}],
    ['status failed', { status: 'failed' as const }],
  ])('%s: the delivered entry is not replayed', async (_, filter) => {
    const store = new MemoryStore();
    const key = 'RACE.1:SUCCESSFUL';
    await failedEntry(store, key);
    let raced = false;
    const result = await replayMatching(
      racing(store, async () => {
        if (raced) return;
        raced = true;
        await deliveredBy(store, key)();
      }),
      filter,
      20,
    );
    expect((await store.get(key))?.status).toBe('delivered');
    expect(result).toMatchObject({ matched: 1, replayed: 0, keys: [] });
  });

  test('an entry still failed is replayed', async () => {
    const store = new MemoryStore();
    const key = 'RACE.2:SUCCESSFUL';
    await failedEntry(store, key);
    expect(await replayMatching(store, { status: 'failed' }, 20)).toMatchObject({ matched: 1, replayed: 1 });
    expect((await store.get(key))?.status).toBe('received');
  });
});
