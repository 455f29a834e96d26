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
 * What `ipn.replay()` resolves: how many entries matched, how many were made due again, and their keys,
 * oldest first (what `ipn.replayProgress()` follows).
 * @inline
 */
export interface ReplayResult {
  matched: number;
  replayed: number;
  keys: string[];
}

/**
 * Where the entries of a bulk replay stand now (`ipn.replayProgress(keys)`): each key counted once.
 * @inline
 */
export interface ReplayProgress {
  /** How many keys were asked about. */
  total: number;
  /** Delivered (their listeners succeeded). */
  delivered: number;
  /** Not yet delivered: due, being delivered, or waiting for a retry (`received` or `failed`). */
  waiting: number;
  /** Every attempt failed again: `dead`. */
  dead: number;
  /** No longer in the inbox (purged meanwhile). */
  gone: number;
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

/** Makes one entry due in `delayMs`, if its status is still one of `from`; whether it did. */
type ReplayOne = (key: string, delayMs: number, from: readonly DeliveryStatus[]) => Promise<boolean>;

/**
 * Replays the entries matching `filter`, paced by the store's own clock: the i-th is due `floor(i / rate)`
 * seconds from now, so at most `rate` entries a second become due, on every instance sharing the store.
 */
export async function replayMatching(
  store: DurableStore,
  filter: ReplayFilter,
  rate: number,
  replayOne: ReplayOne = (key, delayMs, from) => store.replay(key, delayMs, from),
): Promise<ReplayResult> {
  const keys = await matchingKeys(store, filter);
  if (filter.dryRun === true) return { matched: keys.length, replayed: 0, keys: [] };
  // Each is replayed only if still in a status the filter selects, checked in the store's own write: an
  // entry listed as failed that a retry delivered meanwhile is not run again (a second credit).
  const from: readonly DeliveryStatus[] =
    filter.status === undefined ? ['received', 'failed', 'dead'] : [filter.status];
  const replayed: string[] = [];
  for (const [i, key] of keys.entries()) {
    if (await replayOne(key, Math.floor(i / rate) * 1000, from)) replayed.push(key);
  }
  return { matched: keys.length, replayed: replayed.length, keys: replayed };
}

/** How many entries `replayProgress` reads at once. */
const PROGRESS_READS = 8;

/**
 * Where the entries of `keys` stand now, read one by one (`store.get`, `PROGRESS_READS` at a time): the
 * progress of a bulk replay whose keys `replayMatching` resolved.
 */
export async function replayProgress(store: DurableStore, keys: readonly string[]): Promise<ReplayProgress> {
  const unique = [...new Set(keys)];
  const progress: ReplayProgress = { total: unique.length, delivered: 0, waiting: 0, dead: 0, gone: 0 };
  for (let i = 0; i < unique.length; i += PROGRESS_READS) {
    const entries = await Promise.all(unique.slice(i, i + PROGRESS_READS).map((key) => store.get(key)));
    for (const entry of entries) {
      if (entry === undefined) progress.gone += 1;
      else if (entry.status === 'delivered') progress.delivered += 1;
      else if (entry.status === 'dead') progress.dead += 1;
      else progress.waiting += 1;
    }
  }
  return progress;
}

/** A progress as one line: `340 of 1000 delivered, 2 dead again, 658 waiting`. */
export function progressText(progress: ReplayProgress): string {
  const parts = [`${progress.delivered} of ${progress.total} delivered`];
  if (progress.dead > 0) parts.push(`${progress.dead} dead again`);
  if (progress.gone > 0) parts.push(`${progress.gone} purged meanwhile`);
  parts.push(progress.waiting === 0 ? 'none waiting' : `${progress.waiting} waiting`);
  return parts.join(', ');
}

/** How many keys of one bulk replay its audit entry keeps, for its progress to be followed. */
export const KEPT_KEYS = 10_000;

/**
 * What a bulk replay's audit entry keeps of its keys: all of them up to `KEPT_KEYS` (the operator's page
 * shows the progress of the newest replay from them), else none and how many there were.
 */
export function keptKeys(keys: readonly string[]): { keys: string[] } | { keysNotKept: number } {
  return keys.length <= KEPT_KEYS ? { keys: [...keys] } : { keysNotKept: keys.length };
}
