import type { IpnKitError } from '../shared/errors.js';
import type { Logger } from '../observability/logger.js';
import type { ExpectationStore } from './expectation-store.js';
import type { LifecycleStore } from './lifecycle-store.js';

/**
 * A value, or a promise of it: store methods may answer either way.
 * @inline
 */
export type Awaitable<T> = T | Promise<T>;

/**
 * Where the router remembers which notifications it has already handled, so that the service's resends are
 * dropped. The key is `transaction_id + ':' + state`. Every method may return a value or a promise.
 *
 * A store must make `claim` atomic: when many calls race for one key, exactly one of them gets `true`,
 * including across processes if the store is shared. A read-then-write (`get`, then `set`) is not atomic.
 *
 * @example
 * // A store over a shared Map-like service with an atomic "set if absent":
 * const store: Store = {
 *   claim: (key, ttlMs) => kv.setIfAbsent(key, '1', ttlMs), // true when this call set it
 *   release: (key) => kv.delete(key),
 * };
 * app.use('/ipn', ipnRouter({ store }));
 */
export interface Store {
  /**
   * Atomically claims `key` for `ttlMs` milliseconds. `token` is unique to this claim: a networked store
   * should keep it with the key and answer `true` again when the same claim is asked twice, because the
   * router asks again when a claim's answer was lost (a connection reset after the write), and a store
   * that answers `false` then would drop the notification as a resend.
   * @returns `true` when this call (or an earlier one with the same token) claimed the key (first
   * delivery), `false` when another claim holds it and has not expired (a resend).
   */
  claim(key: string, ttlMs: number, token: string): Awaitable<boolean>;
  /**
   * Frees `key`, so that the next claim of it succeeds. The router calls it when a claimed notification is
   * not delivered after all (`verify` rejected it or gave up, or the router closed while verifying), so that
   * a genuine resend or a reconcile is processed instead of dropped as a duplicate.
   */
  release(key: string): Awaitable<void>;
  /**
   * Optional: called once, before the first claim; requests wait for it up to the router's `storeTimeoutMs`,
   * then answer 503. A failure is retried by the next request; one that never settles is never started
   * twice, so give it a timeout of its own.
   */
  init?(): Awaitable<void>;
  /** Optional: called by `ipn.close()`, which waits for it at most the router's `storeTimeoutMs`. */
  close?(): Awaitable<void>;
  /**
   * Optional: told the router's `storeTimeoutMs` when a router is created over this store (the shortest
   * wins when several share it): how long the router waits for a call before it answers 503 or reports
   * it. A store may bound its own waits by it: `PostgresStore`'s group commit lets a batch stuck that long
   * (a connection behind a dropped network) give up its place, so that receives heal at that pace once
   * the network does.
   */
  useStoreTimeout?(storeTimeoutMs: number): void;
  /**
   * Optional: told the router's logger when a router is created over this store (each router's, when several
   * share it). A store warns there, once, when it stops doing something it did at its start because its
   * server refused it: `RedisStore`, when a claim and a receive of one key stop looking at each other.
   */
  useLogger?(logger: Logger): void;
  /**
   * Optional: where `ipn.expect()` keeps expected transactions for the reconciliation sweep. `MemoryStore`,
   * `RedisStore` and `PostgresStore` have one; without it, `ipn.expect()` rejects.
   */
  readonly expectations?: ExpectationStore;
  /**
   * Optional: where each transaction's accepted final state is kept, so that a `FAILED` after a `SUCCESSFUL`
   * of the same transaction is emitted as `conflict`, never as `failed`, on every instance sharing the store.
   * Every built-in store has one. Without it, the router keeps the states in its own memory (this instance
   * only) and logs a warning once at start: two instances could then emit `failed` after `successful`.
   */
  readonly lifecycle?: LifecycleStore;
}

/**
 * Where a stored notification stands: `received` (not yet delivered), `delivered`, `failed` (to be retried), `dead`.
 * @inline
 */
export type DeliveryStatus = 'received' | 'delivered' | 'failed' | 'dead';

/** One notification in a durable store's inbox. */
export interface InboxEntry {
  /** The dedupe key: `transaction_id + ':' + state`. */
  key: string;
  transactionId: string;
  state: string;
  /** The whole notification as received (validated, before any `customData` parsing). */
  record: Record<string, unknown>;
  status: DeliveryStatus;
  /** Delivery attempts started so far (a lease starts one). */
  attempts: number;
  /** The last delivery failure's message, or `null`. */
  lastError: string | null;
  receivedAt: Date;
  updatedAt: Date;
  /** When a `received` or `failed` entry is due for its next attempt. */
  nextAttemptAt: Date;
  deliveredAt: Date | null;
  /** Until when the current lease holds; `null` when no instance holds one. */
  leaseUntil: Date | null;
}

/**
 * A lease: who holds an entry (a random id per attempt) and for how long.
 * @inline
 */
export interface Lease {
  id: string;
  ms: number;
}

/**
 * How a delivery attempt ended.
 * @inline
 */
export type Settlement =
  | { status: 'delivered' }
  | { status: 'failed'; error: string; nextAttemptAt: Date }
  | { status: 'dead'; error: string };

/**
 * Filters of {@link DurableStore.list}. Every filter given must hold.
 * @inline
 */
export interface ListOptions {
  /** Only entries of this status. */
  status?: DeliveryStatus;
  /** Only the entries of this transaction (its `SUCCESSFUL` and `FAILED` notifications). */
  transactionId?: string;
  /** Only entries whose `custom_data` contains this text, ignoring case. */
  customDataContains?: string;
  /** Only entries received at or after this time. */
  receivedFrom?: Date;
  /** Only entries received before this time. */
  receivedBefore?: Date;
  /** `'oldest'` first (the delivery order) or `'newest'` first (an operator's view). @default 'oldest' */
  order?: 'oldest' | 'newest';
  /** At most this many entries. @default 100 */
  limit?: number;
  /** Skips this many entries first, for paging. @default 0 */
  offset?: number;
}

/**
 * How many entries a durable store holds, by status: what {@link DurableStore.countByStatus} resolves.
 * @inline
 */
export type StatusCounts = Record<DeliveryStatus, number>;

/**
 * A store that is also a durable inbox, required by `delivery: 'at-least-once'`: the notification is written
 * before the 200, and each delivery attempt is recorded. Every method is atomic across instances.
 */
export interface DurableStore extends Store {
  readonly durable: true;
  /**
   * Frees `key`, as {@link Store.release}; given `leaseId`, only while that lease still holds the entry, so
   * that an attempt whose lease was lost never deletes what another attempt put there since.
   */
  release(key: string, leaseId?: string): Awaitable<void>;
  /**
   * Records a first delivery: inserts `record` under `key` with status `received`, attempts 1, leased to
   * `lease`. Resolves `false`, changing nothing, when `key` is already there (a resend), or a live claim
   * ({@link Store.claim}, by a router at most once on the same store) holds it; and `claim` of a key the
   * inbox holds resolves `false`: two instances in different delivery modes never both take a notification
   * (`runStoreConformance`'s `claim-receive-exclusive`).
   */
  receive(key: string, record: Record<string, unknown>, lease: Lease): Promise<boolean>;
  /**
   * Puts `record` (the service's own record) in place of the entry of `key` held by `leaseId` (a copy the
   * service contradicted), in one atomic step: status `received`, attempts 1, last error cleared, due now,
   * leased to `lease`. The entry goes from the forged record to the genuine one and never through "absent",
   * so a crash or a failure at any point leaves one of them in the inbox. Resolves `false`, changing
   * nothing, when `leaseId` no longer holds the entry.
   */
  replace(key: string, leaseId: string, record: Record<string, unknown>, lease: Lease): Promise<boolean>;
  /**
   * Takes up to `limit` entries that are `received` or `failed`, due, and not leased (or whose lease expired):
   * leases each to `lease` and counts one more attempt. Two instances never get the same entry at once.
   */
  lease(lease: Lease, limit: number): Promise<InboxEntry[]>;
  /** Ends the attempt held by `leaseId`. Resolves `false` (changing nothing) when that lease was lost. */
  settle(key: string, leaseId: string, settlement: Settlement): Promise<boolean>;
  /** Entries matching every filter of `options`, in its `order`. */
  list(options?: ListOptions): Promise<InboxEntry[]>;
  /** The entry of `key`, or `undefined`. */
  get(key: string): Promise<InboxEntry | undefined>;
  /**
   * Optional: how many notifications the inbox holds by status, those received at or after `receivedFrom`
   * only when it is given. The operator's page (`ipn-kit/admin`) shows them; without it, it shows none.
   */
  countByStatus?(receivedFrom?: Date): Promise<StatusCounts>;
  /**
   * Makes one entry due again now (or `delayMs` from now, by the store's clock: how a bulk replay paces its
   * entries), attempts reset to 0, whatever its status, or given `from` only while its status is one of
   * those, checked in the same atomic write (a bulk replay's guard: an entry it listed as `failed` that a
   * retry delivered since is not run again); a live lease is kept (the attempt holding it finishes first).
   * `false` when there is none, it is in another status, or only a `claim` row without a record.
   */
  replay(key: string, delayMs?: number, from?: readonly DeliveryStatus[]): Promise<boolean>;
  /**
   * Optional: `replay(key, 0, from)` with `record` (the service's own record) put in place of the entry's in
   * the same atomic write: the record replaced, status `received`, attempts reset to 0, due now, only while
   * its status is one of `from` and no live lease holds it (an attempt running on the old record is never
   * changed under it). `false`, changing nothing, when there is no entry, it is in another status or leased,
   * or only a `claim` row without a record. The router calls it when the service's record of an expected
   * transaction contradicts the kept unexpected copy (`failed`, never due) that holds its key, a forgery
   * kept before the payment existed: the genuine record takes its place and is delivered, once. Every
   * built-in store has it; a store without it leaves such a copy kept (the router reports it as an `error`),
   * and the genuine payment is then credited by an operator only. Never an extra argument of `replay`: a
   * store that ignored it would deliver the forged copy.
   */
  replayWith?(
    key: string,
    record: Record<string, unknown>,
    from: readonly DeliveryStatus[],
  ): Promise<boolean>;
  /** Makes every `dead` entry due again now, attempts reset to 0. Resolves how many. */
  replayDead(): Promise<number>;
  /**
   * Deletes `delivered` entries delivered before `before` (their resends are then new); the built-in SQL
   * stores also delete the at-most-once claims made before it that no longer hold their key (their
   * `expires_at` passed, by the database's clock), counted with them, and those still holding it too only
   * given `options.insideDedupeWindow` (a resend of one is then credited again). Given `'dead'`, the
   * `dead` entries that went dead (were last updated) before `before` instead. Resolves how many. A
   * store must not ignore `status`: given `'dead'`, it would delete delivered entries instead, and a purge
   * of dead entries is not held out of the dedupe window (`ipn.inbox.purge(new Date(), 'dead')`, or
   * `retention.deadMs` shorter than `ttlMs`, would delete what makes today's resends duplicates).
   */
  purge(before: Date, status?: PurgedStatus, options?: StorePurgeOptions): Promise<number>;
  /**
   * Optional: blanks the customer's name and number (`customer_name` and `destination`, set to `""`) in the records of
   * `delivered` and `dead` entries received before `before`, keeping every other field (amounts, ids).
   * Resolves how many records changed. The router's `retention.personalDataMs` calls it; every built-in
   * store has it.
   */
  redact?(before: Date): Promise<number>;
  /**
   * Optional: where operator actions (replay, purge, pause) are kept, with who, when and what. Every
   * built-in store has one (a table or key beside the inbox); without it, actions are only logged.
   */
  readonly audit?: AuditLog;
  /**
   * Optional: where `ipn.pause()` is kept for every instance over the store, and across restarts. Every
   * built-in store has one (a row or a key beside the inbox); without it, a pause holds delivery on the
   * instance that made it only, until it stops.
   */
  readonly pauseSwitch?: PauseSwitch;
  /**
   * Optional: why this store would lose the inbox that the docs promise to keep (`RedisStore` on a Redis
   * without persistence), or `undefined`. The router calls it once when it starts at least once, and logs
   * the answer as one warning; a rejection is ignored.
   */
  durabilityWarning?(): Promise<string | undefined>;
  /**
   * Optional: opens a transaction for one delivery attempt, held by `leaseId`, that the listeners write
   * through (their context's `tx`, and `db` when the store has one) and that marks the entry delivered when
   * it commits: their writes and the `delivered` mark commit together or not at all. Resolves `undefined`
   * when this store cannot open one (the attempt is then delivered without it). `PostgresStore` over a pool,
   * or given your ORM's `transactions`, implements it.
   *
   * A store plugs its database into delivery here and nowhere else: delivery knows no SQL, no driver and no
   * error code. It asks the transaction to `commit()` a delivered attempt and to `rollback()` any other;
   * a `commit()` that rejects has an unknown outcome, which delivery settles by reading the entry
   * (`get(key)`): `delivered` means the commit landed.
   */
  begin?(key: string, leaseId: string): Promise<DeliveryTransaction | undefined>;
}

/**
 * Which entries {@link DurableStore.purge} deletes.
 * @inline
 */
export type PurgedStatus = 'delivered' | 'dead';

/**
 * {@link DurableStore.purge}'s options.
 * @inline
 */
export interface StorePurgeOptions {
  /**
   * Delete the at-most-once claims made before `before` that still hold their key as well (clearing the
   * claims an at-most-once crash left): a resend of one is then credited again. A claim made under a longer
   * `ttlMs` than the app's today holds its key until its own `expires_at`, which only this overrides.
   * @default false
   */
  insideDedupeWindow?: boolean;
}

/**
 * The fields of a stored notification that name the customer (personal data): what
 * {@link DurableStore.redact} blanks. Amounts, ids and states stay, for the audit the service asks for.
 */
export const PERSONAL_FIELDS = ['customer_name', 'destination'] as const;

/** One operator action as kept by an {@link AuditLog}. */
export interface AuditEntry {
  /** What was done: `replay`, `replay-dead`, `purge`, `pause`, `resume`, ... */
  action: string;
  /** Who did it: the operator's page's identity, the CLI's OS user or `--actor`, or `'unknown'`. */
  actor: string;
  /** What it was done to and what came of it (a key, a date, a count), as JSON-safe values. */
  detail: Record<string, unknown>;
  /** When the store recorded it. */
  at: Date;
}

/**
 * Options of {@link AuditLog.list}.
 * @inline
 */
export interface AuditListOptions {
  /** At most this many, newest first. @default 100 */
  limit?: number;
  /** Skips this many first, for paging. @default 0 */
  offset?: number;
}

/** Where a durable store keeps whether delivery is paused: one flag per inbox, shared by its instances. */
export interface PauseSwitch {
  /** Whether delivery is paused now. */
  read(): Promise<boolean>;
  /** Pauses (`true`) or resumes (`false`) delivery for every instance over the store. */
  write(paused: boolean): Promise<void>;
}

/** Where a durable store keeps operator actions: append-only, listed newest first. */
export interface AuditLog {
  /** Appends one action; the store stamps its time. */
  record(entry: Omit<AuditEntry, 'at'>): Promise<void>;
  /** The actions kept, newest first. */
  list(options?: AuditListOptions): Promise<AuditEntry[]>;
}

/**
 * Where a delivery transaction stands: `idle` (nothing opened yet: a store may open it lazily, at the
 * listeners' first write, and then `commit()` only marks the entry delivered, as `settle()` would), `open`,
 * or `ended` (committed or rolled back; every later write through it is refused).
 * @inline
 */
export type TransactionState = 'idle' | 'open' | 'ended';

/**
 * What {@link DeliveryTransaction.commit} or {@link DeliveryTransaction.rollback} found when a listener had
 * ended the transaction itself, its writes landed (or maybe landed) outside it.
 * @inline
 */
export interface RolledBack {
  /** How, in words for the entry's last error. */
  landed: string;
}

/**
 * One delivery attempt's transaction (see {@link DurableStore.begin}).
 * @inline
 */
export interface DeliveryTransaction<Tx = unknown, Db = unknown> {
  /** What listeners write through: their context's `tx`. */
  readonly tx: Tx;
  /** Their context's `db`, when the store gives one (`PostgresStore` over a pool: the `pg` client). */
  readonly db?: Db;
  /** Where the transaction stands; read by delivery, changed only by the transaction itself. */
  readonly state: TransactionState;
  /**
   * Marks the entry delivered inside the transaction, guarded by the lease, then commits. Resolves
   * `'delivered'`; or `'lost'`, having rolled back, when the lease was lost (another attempt holds the
   * entry now: the listeners' writes must not land). Rejects when the outcome is unknown (the mark or the
   * commit failed, or its answer was lost): both writes landed or neither did, and the entry says which.
   * Its message says what went wrong in words a partner can act on. Resolves `{ landed }`, having rolled
   * back what was left, when a listener had ended the transaction itself in a way that landed its writes,
   * or may have (see `rollback()`): neither marked delivered nor retried.
   */
  commit(): Promise<'delivered' | 'lost' | RolledBack>;
  /**
   * Rolls the transaction back. `listeners`, when given, is an attempt abandoned while its listeners may
   * still be running: it settles once they have, and the transaction must make sure that no write of
   * theirs lands (by closing its connection, or by rolling back only once they are done). Never rejects.
   * Resolves `{ landed }` when a listener had committed the transaction itself through `tx` (a raw
   * `COMMIT`), so that its writes landed: `landed` says how, and delivery keeps the entry `dead` instead of
   * retrying it, which would write them again. Anything else it resolves (a driver's answer to `ROLLBACK`)
   * is ignored.
   */
  rollback(listeners?: Promise<unknown>): Promise<void | RolledBack>;
  /**
   * Optional: where to tell of a write through `tx` or `db` made once the attempt had ended (refused, it
   * never ran) whose refusal nothing awaited. Delivery calls it once the transaction is open, with a
   * function that reports to the router's `error` event.
   */
  onLateWrite?(report: (error: IpnKitError) => void): void;
}
