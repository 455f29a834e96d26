import type { DeliveryStatus, DurableStore, InboxEntry, ListOptions } from '../stores/store.js';
import { checkListOptions } from '../stores/list-options.js';
import { isKeptUnexpected } from './kept-unexpected.js';

/**
 * Which inbox entries `ipn.replay()` delivers again. Every filter given must hold; none given matches every
 * entry not yet delivered. `dryRun` only counts them.
 * @inline
 */
export interface ReplayFilter {
  /**
   * Only entries of this status (`'dead'`: what `replayDead()` replays). Without it, every status but
   * `delivered`: a delivered payment was credited, and runs its listener again only when named explicitly
   * (`status: 'delivered'`). Whatever the status, a kept unexpected notification (not credited until
   * someone checks it) is never replayed in bulk: replay its key.
   */
  status?: DeliveryStatus;
  /** Only entries received at or after this time. */
  since?: Date;
  /** Only entries received before this time. */
  until?: Date;
  /** Only the entries of these transactions. */
  transactionIds?: readonly string[];
  /** Only entries whose `custom_data` contains this text, ignoring case (the operator's page's search). */
  customDataContains?: string;
  /** Counts the entries that match and replays none (`replayed` is 0). @default false */
  dryRun?: boolean;
}

/**
 * What `ipn.replay()` resolves: how many entries matched, and how many were made due again.
 * @inline
 */
export interface ReplayResult {
  matched: number;
  replayed: number;
}

/** How many entries one `list()` call reads while collecting the matches. */
const PAGE = 500;

/**
 * The keys of the entries matching `filter`, oldest first, collected before any is replayed (a replay
 * changes the status the filter may select on, which would shift the pages).
 */
export async function matchingKeys(store: DurableStore, filter: ReplayFilter): Promise<string[]> {
  for (const [name, value] of [
    ['since', filter.since],
    ['until', filter.until],
  ] as const) {
    if (value !== undefined && !(value instanceof Date && Number.isFinite(value.getTime())))
      throw new TypeError(`ipn.replay: ${name} must be a valid Date, got ${String(value)}`);
  }
  const base: ListOptions = {
    status: filter.status,
    receivedFrom: filter.since,
    receivedBefore: filter.until,
    customDataContains: filter.customDataContains,
  };
  checkListOptions('ipn.replay', base); // a bad status is the caller's TypeError, not a store's error
  const ids = filter.transactionIds === undefined ? [undefined] : [...new Set(filter.transactionIds)];
  // A filter without a status never re-runs a credited payment's listener: `delivered` must be asked for.
  // A kept unexpected notification is never credited in bulk: only a replay of its key, after checking.
  const now = Date.now();
  const wanted = (entry: InboxEntry): boolean =>
    (filter.status === undefined ? entry.status !== 'delivered' : entry.status === filter.status) &&
    !isKeptUnexpected(entry, now);
  const keys = new Set<string>();
  for (const transactionId of ids) {
    for (let offset = 0; ; offset += PAGE) {
      const page = await store.list({ ...base, transactionId, order: 'oldest', limit: PAGE, offset });
      for (const entry of page) if (wanted(entry)) keys.add(entry.key);
      if (page.length < PAGE) break;
    }
  }
  return [...keys];
}

/**
 * Replays the entries matching `filter`, paced by the store's own clock: the i-th is due `floor(i / rate)`
 * seconds from now, so at most `rate` entries a second become due, on every instance sharing the store.
 */
export async function replayMatching(
  store: DurableStore,
  filter: ReplayFilter,
  rate: number,
  replayOne: (key: string, delayMs: number) => Promise<boolean> = (key, delayMs) =>
    store.replay(key, delayMs),
): Promise<ReplayResult> {
  const keys = await matchingKeys(store, filter);
  if (filter.dryRun === true) return { matched: keys.length, replayed: 0 };
  let replayed = 0;
  for (const [i, key] of keys.entries()) {
    if (await replayOne(key, Math.floor(i / rate) * 1000)) replayed += 1;
  }
  return { matched: keys.length, replayed };
}
