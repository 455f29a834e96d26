/**
 * A transaction the partner initiated and expects a notification for (`ipn.expect()`).
 * @inline
 */
export interface Expectation {
  /** The transaction's id, as the initiation returned it. */
  transactionId: string;
  /** The `custom_data` given at initiation, as text; `undefined` when not to be checked. */
  customData?: string | undefined;
  /** The amount of the transaction; `undefined` when not to be checked. */
  amount?: number | undefined;
  /**
   * The account (of the status client's `apiKeys`) whose key created the transaction: the sweep and
   * verification ask with that key first (the others only after its not-found). `undefined`: each key in turn.
   */
  account?: string | undefined;
  /** When `ipn.expect()` was called, in ms since the epoch. */
  expectedAt: number;
  /** When the sweep next asks the service about it, in ms since the epoch. */
  dueAt: number;
  /**
   * Status queries the sweep has made for it so far; 1,000,000,000 and above once it is settled (kept until
   * `dueAt`, the router's `ttlMs` later, so that a late copy is still checked against it).
   */
  attempts: number;
}

/**
 * Where a store keeps expectations, so that they survive a restart (where the store does) and are shared by
 * every instance using it. Every method may answer a value or a promise; `takeDue` and `lockSweep` must be
 * atomic across instances when the store is shared.
 */
export interface ExpectationStore {
  /** Adds (or replaces) the expectation of its `transactionId`. */
  put(expectation: Expectation): void | Promise<void>;
  /** The expectation of `transactionId`, or `undefined`. */
  get(transactionId: string): Expectation | undefined | Promise<Expectation | undefined>;
  /** Forgets the expectation of `transactionId` (settled or given up on, `ttlMs` ago). */
  delete(transactionId: string): void | Promise<void>;
  /**
   * Takes up to `limit` expectations whose `dueAt` is at or before `now`: each is moved to `dueAt =
   * nextDueAt` with one more attempt, and returned so. Two callers never take the same one for one due time.
   */
  takeDue(now: number, nextDueAt: number, limit: number): Expectation[] | Promise<Expectation[]>;
  /** Holds the sweep's lock as `owner` for `ms` (or extends it): `false` when another owner holds it. */
  lockSweep(owner: string, ms: number): boolean | Promise<boolean>;
  /** Lets go of the sweep's lock, if `owner` holds it. */
  unlockSweep(owner: string): void | Promise<void>;
}

/**
 * An expectation's values in the column order of the SQL stores' `put` (`transaction_id, custom_data, amount,
 * expected_at, due_at, attempts, account`), an absent field as `null`. The times in whole milliseconds (rounded
 * up): the columns are integers, and PostgreSQL refuses a fractional one (a wait measured on the monotonic
 * clock, a fractional option).
 */
export function expectationValues(e: Expectation): unknown[] {
  return [
    e.transactionId,
    e.customData ?? null,
    e.amount ?? null,
    Math.ceil(e.expectedAt),
    Math.ceil(e.dueAt),
    e.attempts,
    e.account ?? null,
  ];
}
