import type { DurableStore } from './store.js';

/** How many entries one `list()` page reads. */
const PAGE = 500;

/**
 * `DurableStore.replayDead()` of every built-in store, one rule over `list` and `replay`: the dead entries'
 * keys, oldest first, collected before any is replayed (a replay changes the status the pages select on),
 * then each replayed as `replay(key)` does it. Resolves how many were replayed. As the router's bulk replay
 * (`replayMatching({ status: 'dead' })`), it is one atomic step per entry, not one for them all.
 */
export async function replayEveryDead(store: Pick<DurableStore, 'list' | 'replay'>): Promise<number> {
  const keys: string[] = [];
  for (let offset = 0; ; offset += PAGE) {
    const page = await store.list({ status: 'dead', order: 'oldest', limit: PAGE, offset });
    keys.push(...page.map((entry) => entry.key));
    if (page.length < PAGE) break;
  }
  let replayed = 0;
  for (const key of keys) if (await store.replay(key)) replayed += 1;
  return replayed;
}
