import { IpnKitError, messageOf, StoreError } from '../shared/errors.js';
import type { IpnNotification } from '../notification/schema.js';
import type { Expectation, ExpectationStore } from '../stores/expectation-store.js';
import type { Store } from '../stores/store.js';
import { sameCustomData, type RejectedEvent, type VerifiedField } from '../status/verify-notification.js';
import type { DeliveryContext } from './delivery-context.js';
import { monotonicNow } from '../shared/clock.js';
import { checkAccount } from './accounts.js';
import { within } from '../shared/within.js';

/**
 * The mark the first `ipn.expect()` leaves in the store's expectations: once there, every instance over the
 * store treats a notification with no expectation as unexpected (option `unexpected`). Not the shape of a
 * transaction id (letters, a dot or an underscore, digits): no notification can name it.
 */
export const IN_USE_MARK = 'ipn-kit:expectations-in-use';
/** The mark and a settled expectation are never due for the sweep before this time (ms since the epoch). */
const NEVER = Date.UTC(9000, 0, 1);
/** How often a router whose store holds no mark yet looks for it again. */
export const MARK_RECHECK_MS = 10_000;
/** How often one process writes the mark again (it may have been removed by hand). */
const MARK_REFRESH_MS = 60 * 60_000;
/**
 * `attempts` of a settled expectation (a tombstone): kept for the router's `ttlMs` after it was settled,
 * given up on or forgotten, so that a resend or a late first delivery is still checked against it.
 */
export const SETTLED_ATTEMPTS = 1_000_000_000;

/** Whether this expectation is kept only to recognise late copies (settled, given up on, or forgotten). */
export const isSettled = (e: Expectation): boolean => e.attempts >= SETTLED_ATTEMPTS;

/**
 * What `ipn.expect()` takes besides the transaction id: what to check the notification against.
 * @inline
 */
export interface ExpectOptions {
  /** The `custom_data` given at initiation: text, or a value sent as its JSON text. */
  customData?: unknown;
  /** The transaction's amount. */
  amount?: number;
  /**
   * With several API keys (`createStatusClient({ apiKeys })`): the account whose key created the
   * transaction. The sweep and verification ask with that key first (the others only after its not-found);
   * without it, each key in turn.
   */
  account?: string;
}

/** What an incoming notification's expectation says about it. */
export type ExpectationCheck =
  | { kind: 'none' }
  /** Expectations are in use and none is kept for this transaction: the option `unexpected` decides. */
  | { kind: 'unexpected' }
  | { kind: 'match'; expectation: Expectation }
  | { kind: 'mismatch'; event: RejectedEvent }
  | { kind: 'error'; error: StoreError };

/**
 * The expectation of a copy claimed before it is verified (at most once, `verify`): settled once verification
 * confirms the copy (or delivers the service's record in its place), made due again when it gives the copy up.
 */
export interface ExpectationHold {
  settle(): void;
  reopen(): void;
}

/** The check of a notification no expectation is kept for. */
export const NO_EXPECTATION: ExpectationCheck = Object.freeze({ kind: 'none' });

/**
 * Whether an outcome of an expected transaction ends its expectation, whoever learnt it (the router from a
 * notification, the sweep from a status query). Only `SUCCESSFUL` does. A `FAILED` leaves it in place: the
 * service may still turn the transaction `SUCCESSFUL`, and a `SUCCESSFUL` copy must then match the
 * expectation too (a forged one, with another amount, is rejected); the sweep forgets it after
 * `reconcileAttempts` queries.
 */
export function settlesExpectation(state: string): boolean {
  return state === 'SUCCESSFUL';
}

/** The fields where a record contradicts its expectation (only the fields the expectation holds). */
export function contradictions(expectation: Expectation, record: IpnNotification): VerifiedField[] {
  const fields: VerifiedField[] = [];
  if (expectation.amount !== undefined && expectation.amount !== record.amount) fields.push('amount');
  if (expectation.customData !== undefined && !sameCustomData(expectation.customData, record.custom_data))
    fields.push('custom_data');
  return fields;
}

/**
 * Whether the service's own record, about to be delivered in a forgery's place (`genuineRecord`), may be:
 * not when the transaction's expectation (settled or not) contradicts it, as the sweep rejects such a record
 * and the router the genuine copy itself (`rejected`). An expectation the store cannot read within
 * `storeTimeoutMs` is the `StoreError` resolved, for the caller to retry as an unanswered verification:
 * never credited on a guess, and never its key released on it either, since the genuine copy may have been
 * answered as a duplicate of the forgery's key meanwhile, and the forgery's claim settled the expectation
 * (the sweep no longer asks about it): that key is all that is left of the payment.
 */
export async function expectationAllows<C>(
  context: DeliveryContext<C>,
  record: IpnNotification,
): Promise<boolean | StoreError> {
  const allowance = await recordAllowance(context, record);
  return allowance instanceof StoreError ? allowance : allowance.allowed;
}

/** Whether the service's record may be delivered, and the expectation read to tell (none: `undefined`). */
export type RecordAllowance = { allowed: boolean; expectation: Expectation | undefined } | StoreError;

/**
 * {@link expectationAllows}, with the expectation it read (`ipn.reconcile()` settles it, as the sweep does).
 * `notDone` ends the `StoreError`'s message: what the caller does not do for want of the expectation.
 */
export async function recordAllowance<C>(
  context: DeliveryContext<C>,
  record: IpnNotification,
  notDone = "its record not delivered in a forgery's place",
): Promise<RecordAllowance> {
  const { options, reject } = context;
  const kept = options.store.expectations;
  if (kept === undefined) return { allowed: true, expectation: undefined };
  const id = record.transaction_id;
  let expectation: Expectation | undefined;
  try {
    const late = () => new StoreError(`the store did not read the expectation of ${id} in time`);
    expectation = await within(
      Promise.resolve().then(() => kept.get(id)),
      options.storeTimeoutMs,
      late,
    );
  } catch (cause) {
    const message = `the store failed to read the expectation of ${id}: ${messageOf(cause)}: ${notDone}`;
    return new StoreError(message, { cause });
  }
  const mismatches = expectation === undefined ? [] : contradictions(expectation, record);
  if (mismatches.length === 0) return { allowed: true, expectation };
  const message = `the service's record of ${id} contradicts its expectation in ${mismatches.join(', ')}: not credited`;
  reject({ reason: 'mismatch', message, mismatches, notification: record, status: record });
  return { allowed: false, expectation };
}

/**
 * Keeps `e` as settled for `ttlMs` from now (as long as the dedupe key of its notification), in place of
 * deleting it: a resend or a late first delivery is then still checked against it, never taken for an
 * unexpected one. The sweep deletes it when that time is due.
 */
export function retire(store: ExpectationStore, e: Expectation, ttlMs: number): void | Promise<void> {
  return store.put({ ...e, attempts: SETTLED_ATTEMPTS, dueAt: Math.min(Date.now() + ttlMs, NEVER) });
}

/** The expectations of a router: `ipn.expect()`, the check of each notification, and settling. */
export function createExpectations<C>(context: DeliveryContext<C>, store: Store) {
  const { options, report, write } = context;
  const expectations: ExpectationStore | undefined = store.expectations;
  // A router that never uses expectations pays one read of the mark per MARK_RECHECK_MS for them, no more.
  let active = options.statusClient !== undefined;
  /** This process called `ipn.expect()`. */
  let local = false;
  /** The store holds the mark (once seen, for good), and when this process last looked for it. */
  let marked = false;
  let lookedAt = -Infinity;
  /** When this process last wrote the mark (ms since the epoch). */
  let markedAt = -Infinity;
  const policed = options.unexpected !== 'accept';

  function stored(): ExpectationStore {
    if (expectations) return expectations;
    throw new IpnKitError(
      'IPN_NO_EXPECTATIONS',
      'ipn.expect() needs a store that keeps expectations: MemoryStore, RedisStore, PostgresStore, MysqlStore or SqliteStore',
    );
  }

  /**
   * Whether expectations are in use on this store, from any instance: this process called `ipn.expect()`,
   * or the store holds the mark the first call leaves. Not seen yet, it is looked for again at most every
   * {@link MARK_RECHECK_MS}: a router that never uses expectations pays one read per interval.
   */
  async function inUseAnywhere(
    target: ExpectationStore,
    bounded: <T>(read: T | Promise<T>) => T | Promise<T>,
  ): Promise<boolean> {
    if (local || marked) return true;
    if (monotonicNow() - lookedAt < MARK_RECHECK_MS) return false;
    const mark = await bounded(target.get(IN_USE_MARK));
    lookedAt = monotonicNow();
    marked = mark !== undefined;
    return marked;
  }

  return {
    /** The store's expectations, if it has any. */
    store: expectations,

    async expect(transactionId: string, given: ExpectOptions = {}): Promise<void> {
      if (typeof transactionId !== 'string' || transactionId.length === 0)
        throw new TypeError('ipn.expect: transactionId must be a non-empty string');
      if (transactionId === IN_USE_MARK)
        throw new TypeError(`ipn.expect: ${IN_USE_MARK} is ipn-kit's own mark, not a transaction id`);
      const { customData, amount } = given ?? {};
      const account = checkAccount(given?.account, [options.statusClient, options.verify]);
      if (amount !== undefined && (typeof amount !== 'number' || !Number.isFinite(amount)))
        throw new TypeError(`ipn.expect: amount must be a finite number, got ${String(amount)}`);
      const text =
        customData === undefined || typeof customData === 'string' ? customData : JSON.stringify(customData);
      const target = stored();
      const now = Date.now();
      if (now - markedAt >= MARK_REFRESH_MS) {
        // Before the expectation: an instance that sees an expectation of this store also sees the mark.
        await target.put({ transactionId: IN_USE_MARK, expectedAt: now, dueAt: NEVER, attempts: 0 });
        markedAt = now;
      }
      active = true;
      local = true;
      await target.put({
        transactionId,
        customData: text,
        amount,
        ...(account === undefined ? {} : { account }),
        expectedAt: now,
        dueAt: now + options.reconcileAfterMs,
        attempts: 0,
      });
    },

    /**
     * Whether {@link check} can find anything: `false` without a store of expectations. With one, `check`
     * reads only the mark of their use (at most every {@link MARK_RECHECK_MS}) until they are in use, on
     * any instance: an expectation another instance kept is checked here too, whatever the option
     * `unexpected` (with `'accept'`, a forged copy of an expected transaction was credited by an instance
     * that had not called `ipn.expect()` itself).
     */
    inUse: (): boolean => expectations !== undefined,

    /**
     * Whether expectations protect this router from forged notifications now: a `statusClient`, this
     * process's `ipn.expect()`, or the mark of another instance's, once seen (for the unprotected warning).
     */
    protecting: (): boolean => expectations !== undefined && (active || local || marked),

    /**
     * Compares a notification with its expectation, if there is one; no status query is made. `unexpected`
     * when there is none while expectations are in use on this store (and `unexpected` is not `'accept'`).
     */
    async check(n: IpnNotification): Promise<ExpectationCheck> {
      if (!expectations) return NO_EXPECTATION;
      const id = n.transaction_id;
      // Each read bounded as every store call before the answer: one stuck behind a lock or a full pool is a
      // 503 after storeTimeoutMs (the service resends), never a request that hangs; a late answer changes
      // nothing. A store that answers at once (MemoryStore) makes no timer.
      let late: StoreError | undefined;
      const timedOut = (): StoreError =>
        (late = new StoreError(
          `the store did not read the expectation of ${id} within ${options.storeTimeoutMs} ms (storeTimeoutMs)`,
        ));
      const bounded = <T>(read: T | Promise<T>): T | Promise<T> =>
        read instanceof Promise ? within(read, options.storeTimeoutMs, timedOut) : read;
      let expectation: Expectation | undefined;
      let policing: boolean;
      try {
        const anywhere = await inUseAnywhere(expectations, bounded);
        policing = policed && anywhere;
        if (!active && !anywhere) return NO_EXPECTATION;
        expectation = await bounded(expectations.get(id));
      } catch (cause) {
        if (late !== undefined && cause === late) return { kind: 'error', error: late };
        const message = `the store failed to read the expectation of ${id}: ${messageOf(cause)}`;
        return { kind: 'error', error: new StoreError(message, { cause }) };
      }
      // The mark is no transaction's expectation: a notification naming it is as unexpected as any other.
      if (expectation === undefined || n.transaction_id === IN_USE_MARK)
        return policing ? { kind: 'unexpected' } : NO_EXPECTATION;
      const mismatches = contradictions(expectation, n);
      if (mismatches.length === 0) return { kind: 'match', expectation };
      const message = `the notification of ${n.transaction_id} contradicts its expectation in ${mismatches.join(', ')}: not credited`;
      return { kind: 'mismatch', event: { reason: 'mismatch', message, mismatches, notification: n } };
    },

    /**
     * A copy that matched its expectation and claimed its key, which verification then gave up on (the key
     * released): its expectation is due again now. A sweep meanwhile found that key held, took the copy for
     * a delivered one and settled the expectation; the genuine copy, answered as its duplicate, is then
     * nowhere but in the service's record, which the sweep delivers once it asks again.
     */
    reopen(n: IpnNotification, checked: ExpectationCheck): void {
      if (!expectations || checked.kind !== 'match' || !settlesExpectation(n.state)) return;
      if (isSettled(checked.expectation)) return;
      const { expectation } = checked;
      // Awaited by nobody but close(): it runs there, as the router closes over a copy being verified.
      void write(
        Promise.resolve()
          .then(() => expectations.put({ ...expectation, dueAt: Date.now() }))
          .catch((cause: unknown) =>
            report(
              new StoreError(
                `the store failed to make the expectation of ${n.transaction_id} due again: ${messageOf(cause)}`,
                { cause },
              ),
              n,
            ),
          ),
      );
    },

    /**
     * A notification that matched its expectation was accepted: the expectation is settled when its state
     * ends it ({@link settlesExpectation}: `SUCCESSFUL`, not `FAILED`). Settled, it is kept for `ttlMs`
     * ({@link retire}), so that a resend is still recognised as expected.
     */
    settle(n: IpnNotification, checked: ExpectationCheck): void {
      if (!expectations || checked.kind !== 'match' || !settlesExpectation(n.state)) return;
      if (isSettled(checked.expectation)) return;
      const { expectation } = checked;
      // Awaited by nobody but close() (a copy verified, or a claim landed late, as the router closes).
      void write(
        Promise.resolve()
          .then(() => retire(expectations, expectation, options.ttlMs))
          .catch((cause: unknown) =>
            report(
              new StoreError(
                `the store failed to settle the expectation of ${n.transaction_id}: ${messageOf(cause)}`,
                { cause },
              ),
              n,
            ),
          ),
      );
    },
  };
}

/** What {@link createExpectations} returns. */
export type Expectations = ReturnType<typeof createExpectations>;
