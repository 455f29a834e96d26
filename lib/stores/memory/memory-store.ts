import { checkLeaseLimit, checkReplayWith, leaseMs, replayEveryDead } from '../store-core.js';
import { checkListOptions } from '../list-options.js';
import { MemoryInbox } from './memory-inbox.js';
import { IpnKitError, messageOf, StoreError } from '../../shared/errors.js';
import { MemoryExpectations } from './memory-expectations.js';
import { MemoryLifecycle } from './memory-lifecycle.js';
import { MemoryAudit } from './memory-audit.js';
import type {
  DeliveryStatus,
  DurableStore,
  PurgedStatus,
  InboxEntry,
  Lease,
  ListOptions,
  PauseSwitch,
  Settlement,
  StatusCounts,
} from '../store.js';

/**
 * Options of {@link MemoryStore}.
 * @inline
 */
export interface MemoryStoreOptions {
  /**
   * Most keys kept at once. When full, the oldest key is forgotten first, so a very late resend of it would
   * be delivered again: size it above the notifications you receive within the router's `ttlMs`.
   * @default 100_000 (about 14 MB of heap when full)
   */
  maxEntries: number;
  /** Clock in milliseconds, for tests. @default Date.now */
  now: () => number;
}

/** Stale queue entries (released or re-claimed keys) tolerated before the queue is rebuilt. */
const SLACK = 4096;

/** How many of the latest claims' tokens a MemoryStore keeps (see `#tokens`). */
const RECENT_TOKENS = 4096;

/**
 * The default store: dedupe in this process's memory. Bounded by TTL and by `maxEntries`, O(1) per
 * operation (amortised), no timers (nothing keeps the process alive). It does not survive a restart and is
 * not shared between instances: when you run more than one, give them one shared store.
 *
 * When more than `maxEntries` notifications arrive within the TTL (heavy traffic, or a flood of forged
 * posts), the oldest keys are forgotten to make room, and a late resend of one of them would be emitted
 * again; `evictions` counts them. Forgetting was chosen over refusing new claims, which would answer 503 to
 * every genuine payment until the flood's keys expire.
 *
 * With `delivery: 'at-least-once'` it keeps each notification and its delivery state in memory too: a
 * listener that fails is retried with the same backoff while the process lives. That survives a listener's
 * transient failure, not a crash or a restart: use `PostgresStore` for that. Delivered entries are forgotten
 * oldest first beyond `maxEntries` (never undelivered ones), or by `purge`.
 *
 * @example
 * app.use('/ipn', ipnRouter({ store: new MemoryStore({ maxEntries: 500_000 }) }));
 * @example
 * // Retries in this process, lost on a crash:
 * app.use('/ipn', ipnRouter({ store: new MemoryStore(), delivery: 'at-least-once' }));
 */
export class MemoryStore implements DurableStore {
  /** Accepted by `delivery: 'at-least-once'`; durable only while this process lives. */
  readonly durable = true as const;
  readonly maxEntries: number;
  /** The transactions `ipn.expect()` was told about, in this process's memory too (at most `maxEntries`). */
  readonly expectations: MemoryExpectations;
  /** Each transaction's accepted final state, in this process's memory too (at most `maxEntries`). */
  readonly lifecycle: MemoryLifecycle;
  /** Operator actions (replay, purge, pause), in this process's memory too (at most `maxEntries`). */
  readonly audit: MemoryAudit;
  /** Whether delivery is paused, for every router over this store in this process. */
  readonly pauseSwitch: PauseSwitch = memoryPauseSwitch();
  readonly #now: () => number;
  /** key -> expiry time of its live claim. */
  readonly #expiries = new Map<string, number>();
  /**
   * Claims in the order they were made, as two parallel arrays read from `#head`: the sweep only ever looks
   * at the front. (Iterating the Map itself from its start would walk past every deleted slot V8 keeps.)
   * An entry whose expiry is no longer the Map's for its key is stale: the key was released or re-claimed.
   */
  #keys: string[] = [];
  #times: number[] = [];
  #head = 0;
  /**
   * The tokens of the latest claims (at most RECENT_TOKENS, oldest forgotten first): the same claim asked
   * again wins again, as `Store.claim` asks. The router asks again only right after a lost answer, so the
   * latest claims are enough, and a million keys do not carry a token each.
   */
  readonly #tokens = new Map<string, string>();
  #evictions = 0;
  /** The notifications kept at least once (`receive`), apart from the at-most-once claims. */
  readonly #inbox: MemoryInbox;

  constructor(options: Partial<MemoryStoreOptions> = {}) {
    const maxEntries = options.maxEntries ?? 100_000;
    if (!Number.isInteger(maxEntries) || maxEntries < 1) {
      throw new TypeError(`MemoryStore: maxEntries must be a positive integer, got ${String(maxEntries)}`);
    }
    this.maxEntries = maxEntries;
    this.#now = options.now ?? Date.now;
    this.#inbox = new MemoryInbox(maxEntries, () => this.#now());
    this.expectations = new MemoryExpectations(maxEntries, () => this.#now());
    this.lifecycle = new MemoryLifecycle(maxEntries, () => this.#now());
    this.audit = new MemoryAudit(maxEntries, () => this.#now());
  }

  /** Number of keys held (claims, expired ones not yet swept included, and inbox entries). */
  get size(): number {
    return this.#expiries.size + this.#inbox.size;
  }

  /**
   * How many keys were forgotten before they expired (or, at least once, delivered entries before a purge),
   * to stay within `maxEntries`. Above 0: size up.
   */
  get evictions(): number {
    return this.#evictions + this.#inbox.evictions;
  }

  /**
   * At least once: stores `record` as received, leased to `lease`; `false` when `key` is there already, or a
   * live claim holds it (a router at most once on this store): a claim and a receive of one key exclude each
   * other, as in every store.
   */
  receive(key: string, record: Record<string, unknown>, lease: Lease): Promise<boolean> {
    return settled(() => {
      leaseMs('MemoryStore', lease);
      if ((this.#expiries.get(key) ?? -Infinity) > this.#now()) return false;
      return this.#inbox.receive(key, record, lease);
    });
  }

  /** Leases up to `limit` due entries, oldest received first. */
  lease(lease: Lease, limit: number): Promise<InboxEntry[]> {
    return settled(() => {
      leaseMs('MemoryStore', lease);
      checkLeaseLimit('MemoryStore', limit);
      return this.#inbox.lease(lease, limit);
    });
  }

  /** Ends the attempt held by `leaseId`; `false` when that lease was lost. */
  settle(key: string, leaseId: string, settlement: Settlement): Promise<boolean> {
    return settled(() => this.#inbox.settle(key, leaseId, settlement));
  }

  /** Inbox entries matching every filter, oldest (or newest) first. */
  list(options: ListOptions = {}): Promise<InboxEntry[]> {
    return settled(() => this.#inbox.list(checkListOptions('MemoryStore', options)));
  }

  /** How many inbox entries there are by status (received at or after `receivedFrom`, when given). */
  countByStatus(receivedFrom?: Date): Promise<StatusCounts> {
    return settled(() => this.#inbox.countByStatus(receivedFrom));
  }

  /** The inbox entry of `key`, or `undefined`. */
  get(key: string): Promise<InboxEntry | undefined> {
    return settled(() => this.#inbox.get(key));
  }

  /** Makes `key` due now, attempts 0, whatever its status. */
  replay(key: string, delayMs?: number, from?: readonly DeliveryStatus[]): Promise<boolean> {
    return settled(() => this.#inbox.replay(key, delayMs, from));
  }

  /** `replay(key, 0, from)` with the service's `record` in place, atomically (see `DurableStore.replayWith`). */
  replayWith(
    key: string,
    record: Record<string, unknown>,
    from: readonly DeliveryStatus[],
  ): Promise<boolean> {
    return settled(() => {
      checkReplayWith('MemoryStore', record, from);
      return this.#inbox.replayWith(key, record, from);
    });
  }

  /** Replays every dead entry; resolves how many. */
  replayDead(): Promise<number> {
    return replayEveryDead(this);
  }

  /** Deletes delivered entries delivered before `before`; resolves how many. */
  purge(before: Date, status?: PurgedStatus): Promise<number> {
    return settled(() => this.#inbox.purge(before, status));
  }

  /** Blanks the customer's name and number in delivered and dead entries received before `before`. */
  redact(before: Date): Promise<number> {
    return settled(() => this.#inbox.redact(before));
  }

  claim(key: string, ttlMs: number, token?: string): boolean {
    if (this.#inbox.has(key)) return false; // received at least once, by a router in that mode: a resend
    const now = this.#now();
    const expiry = this.#expiries.get(key);
    if (expiry !== undefined && expiry > now) return token !== undefined && this.#tokens.get(key) === token;
    this.#tokens.delete(key); // a token of an expired claim no longer holds the key
    if (token !== undefined) {
      this.#tokens.set(key, token);
      if (this.#tokens.size > RECENT_TOKENS) this.#tokens.delete(this.#tokens.keys().next().value!);
    }
    // An expired claim of this key is replaced, not added to: it must not push a live key out.
    if (expiry !== undefined) this.#expiries.delete(key);
    this.#sweep(now);
    const until = now + ttlMs;
    this.#expiries.set(key, until);
    this.#keys.push(key);
    this.#times.push(until);
    return true;
  }

  /** Frees `key`; at least once, given `leaseId`, only while that lease holds its inbox entry. */
  release(key: string, leaseId?: string): void {
    if (leaseId === undefined) {
      this.#expiries.delete(key);
      this.#tokens.delete(key);
    }
    this.#inbox.delete(key, leaseId);
  }

  /** Puts the service's `record` in place of the entry held by `leaseId`, atomically (see `DurableStore`). */
  replace(key: string, leaseId: string, record: Record<string, unknown>, lease: Lease): Promise<boolean> {
    return settled(() => {
      leaseMs('MemoryStore', lease);
      return this.#inbox.replace(key, leaseId, record, lease);
    });
  }

  /** Forgets every claim (the inbox's entries stay). */
  clear(): void {
    this.#expiries.clear();
    this.#tokens.clear();
    this.#keys = [];
    this.#times = [];
    this.#head = 0;
  }

  /** Drops expired keys from the front, then the oldest while full: amortised O(1) per claim. */
  #sweep(now: number): void {
    const expiries = this.#expiries;
    let head = this.#head;
    for (; head < this.#keys.length; head += 1) {
      const key = this.#keys[head]!;
      const expiry = this.#times[head]!;
      if (expiries.get(key) !== expiry) continue; // stale
      if (expiry > now && expiries.size < this.maxEntries) break;
      if (expiry > now) this.#evictions += 1;
      expiries.delete(key);
    }
    this.#head = head;
    const pending = this.#keys.length - head;
    // Compact once the passed part is most of the queue, or stale entries outnumber live ones: each compaction
    // costs no more than the steps since the last one.
    if ((head > SLACK && head * 2 > this.#keys.length) || pending > 2 * expiries.size + SLACK)
      this.#compact();
  }

  /** Keeps only the live entries from the head on. */
  #compact(): void {
    const keys: string[] = [];
    const times: number[] = [];
    for (let index = this.#head; index < this.#keys.length; index += 1) {
      const key = this.#keys[index]!;
      const expiry = this.#times[index]!;
      if (this.#expiries.get(key) === expiry) {
        keys.push(key);
        times.push(expiry);
      }
    }
    this.#keys = keys;
    this.#times = times;
    this.#head = 0;
  }
}

/** The inbox answers at once; as a promise, as `DurableStore` says, and a throw as a rejection. */
function settled<T>(run: () => T): Promise<T> {
  try {
    return Promise.resolve(run());
  } catch (error) {
    // A wrong argument (a TypeError) is the caller's mistake, passed on as it is; anything else (a record
    // structuredClone cannot copy, or one so deep that copying it overflows the stack: a RangeError, which
    // no check of this store throws) is the store failing, as for the other stores.
    const mistake = error instanceof TypeError || error instanceof IpnKitError;
    return Promise.reject(
      mistake ? error : new StoreError(`MemoryStore: ${messageOf(error)}`, { cause: error }),
    );
  }
}

/** A pause kept in this process's memory. */
function memoryPauseSwitch(): PauseSwitch {
  let paused = false;
  return {
    read: () => Promise.resolve(paused),
    write: (value) => {
      paused = value;
      return Promise.resolve();
    },
  };
}
