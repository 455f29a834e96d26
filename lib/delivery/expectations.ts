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

/**
 * `attempts` of an expectation settled because the service's record contradicted it (`rejected` by the sweep
 * or `ipn.reconcile()`): settled as any, and never made due again by a copy that verification gives up on
 * (that record would only be rejected a second time; see `reopen`).
 */
export const REJECTED_ATTEMPTS = SETTLED_ATTEMPTS + 1;

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
 * The expectation of a copy claimed before it is verified (at most once, `verify`), or whose claim landed after
 * `storeTimeoutMs`: settled once verification confirms the copy (`verified`: the service's record when
 * delivered in its place) or the late claim lands, made due again when verification gives the copy up. Both
 * act on what the store holds then (an `ipn.expect()` of the transaction may have replaced it meanwhile).
 */
export interface ExpectationHold {
  settle(verified?: IpnNotification): void;
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

/**
 * Whether the service's record may be delivered, and the expectation read to tell (none: `undefined`); not
 * allowed, the `rejected` event that says why.
 */
export type RecordAllowance =
  { allowed: boolean; expectation: Expectation | undefined; rejection?: RejectedEvent } | StoreError;

/**
 * {@link expectationAllows}, with the expectation it read (`ipn.reconcile()` settles it, as the sweep does).
 * `notDone` ends the `StoreError`'s message: what the caller does not do for want of the expectation. With
 * `emits` false, the `rejected` event is the caller's to emit (`rejection`), once it wrote the expectation
 * rejected, as the sweep does: a listener that corrects the expectation then is not written over.
 */
export async function recordAllowance<C>(
  context: DeliveryContext<C>,
  record: IpnNotification,
  notDone = "its record not delivered in a forgery's place",
  emits = true,
): Promise<RecordAllowance> {
  const { options, reject } = context;
  const kept = options.store.expectations;
  if (kept === undefined) return { allowed: true, expectation: undefined };
  const id = record.transaction_id;
  let expectation: Expectation | undefined;
  try {
    expectation = await context.bounded(
      Promise.resolve().then(() => kept.get(id)),
      `read the expectation of ${id}`,
    );
  } catch (cause) {
    const message = `the store failed to read the expectation of ${id}: ${messageOf(cause)}: ${notDone}`;
    return new StoreError(message, { cause });
  }
  const mismatches = expectation === undefined ? [] : contradictions(expectation, record);
  if (mismatches.length === 0) return { allowed: true, expectation };
  const message = `the service's record of ${id} contradicts its expectation in ${mismatches.join(', ')}: not credited`;
  const rejection: RejectedEvent = {
    reason: 'mismatch',
    message,
    mismatches,
    notification: record,
    status: record,
  };
  if (emits) reject(rejection);
  return { allowed: false, expectation, rejection };
}

/**
 * Keeps `e` as settled for `ttlMs` from now (as long as the dedupe key of its notification), in place of
 * deleting it: a resend or a late first delivery is then still checked against it, never taken for an
 * unexpected one. The sweep deletes it when that time is due.
 */
export function retire(
  store: ExpectationStore,
  e: Expectation,
  ttlMs: number,
  attempts: number = SETTLED_ATTEMPTS,
): void | Promise<void> {
  return store.put(retired(e, ttlMs, attempts));
}

/** `e` settled, kept for `ttlMs` from now (see {@link retire}); `attempts` {@link REJECTED_ATTEMPTS} when rejected. */
const retired = (e: Expectation, ttlMs: number, attempts: number = SETTLED_ATTEMPTS): Expectation => ({
  ...e,
  attempts,
  dueAt: Math.min(Date.now() + ttlMs, NEVER),
});

/**
 * Whether `a` and `b` are the same call of `ipn.expect()`: its time and fields. The sweep's attempts and due
 * time (and a settlement) aside: another call of the same transaction, even with the same fields, is another.
 */
export function sameExpectation(a: Expectation, b: Expectation): boolean {
  return (
    a.expectedAt === b.expectedAt &&
    a.amount === b.amount &&
    a.customData === b.customData &&
    a.account === b.account
  );
}

/** The expectations of a router: `ipn.expect()`, the check of each notification, and settling. */
export function createExpectations<C>(context: DeliveryContext<C>, store: Store) {
  const { options, bounded, reject, report, write } = context;
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

  /**
   * Reads the expectation of `n`'s transaction as the store holds it now, and writes what `next` makes of it
   * (nothing when it returns `undefined`, or when none is held). A read or write that fails, or a read not
   * answered within `storeTimeoutMs`, is reported (`error`), never an unhandled rejection: nothing is
   * written then (the expectation stays as held, for the sweep).
   *
   * Not atomic: a store has no compare-and-set. An `ipn.expect()` of the transaction landing between the
   * read and the write is overwritten by what `next` made of the one read. The write follows the read with
   * nothing awaited in between, so that window is one round trip of the store (a read answered after
   * `storeTimeoutMs` writes nothing: the window never grows past it), where it was the whole verification
   * when the expectation as checked before the claim was written back.
   */
  function rewriteHeld(
    target: ExpectationStore,
    n: IpnNotification,
    steps: { read: string; write: string },
    next: (held: Expectation) => Expectation | undefined,
  ): Promise<void> {
    const id = n.transaction_id;
    let reading = true;
    // Counted as one write, the read included, until the write after it settles: close() waits for the
    // whole (it runs there, as the router closes over a copy being verified), else the write, one round
    // trip after the read, runs into the pool the host ends once close() resolved.
    return write(
      Promise.resolve(
        bounded(
          Promise.resolve().then(() => target.get(id)),
          `read the expectation of ${id} to ${steps.read}`,
        ),
      )
        .then((held) => {
          reading = false;
          const rewritten = held === undefined ? undefined : next(held);
          if (rewritten !== undefined) return target.put(rewritten);
        })
        .catch((cause: unknown) => {
          const message = reading
            ? `the store failed to read the expectation of ${id} to ${steps.read}: ${messageOf(cause)}`
            : `the store failed to ${steps.write}: ${messageOf(cause)}`;
          report(cause instanceof StoreError ? cause : new StoreError(message, { cause }), n);
        }),
    );
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
     *
     * Verification ran for seconds to minutes after the check: what the store holds now is made due, not the
     * expectation as checked then, so that an `ipn.expect()` of the transaction meanwhile (the amount
     * corrected) keeps its own fields, and the sweep credits the record against it. Held settled, it is made
     * live again whether it is the one checked or a newer one: while the copy held the key (every SUCCESSFUL
     * copy of the transaction has that key), nothing but the sweep could have settled it, taking the held key
     * for a delivered copy, so no credit was made of it; left settled, the payment would be lost. The sweep's
     * record still goes through the same dedupe key. None held any more (deleted): nothing is written.
     *
     * Without `checked` (at least once with `verify`: the inbox entry went dead unverified, or was rejected
     * and its key released, in an attempt of recovery that knows nothing of the check before its claim),
     * whatever is held is made due, settled or not: while that entry held the key of the transaction's
     * `SUCCESSFUL`, nothing of this inbox credited it. A settled one is asked about afresh (attempts 0).
     */
    reopen(n: IpnNotification, checked?: ExpectationCheck): void {
      if (!expectations || !settlesExpectation(n.state)) return;
      if (checked !== undefined && checked.kind !== 'match') return;
      const expectation = checked?.expectation;
      if (expectation !== undefined && isSettled(expectation)) return;
      const steps = {
        read: 'make it due again',
        write: `make the expectation of ${n.transaction_id} due again`,
      };
      void rewriteHeld(expectations, n, steps, (held) => {
        // Settled as rejected (the service's record contradicts it): made due, the sweep would only reject
        // that record a second time (a second `rejected`), never credit it.
        if (held.attempts === REJECTED_ATTEMPTS) return undefined;
        const attempts = !isSettled(held)
          ? held.attempts
          : expectation !== undefined && sameExpectation(held, expectation)
            ? expectation.attempts
            : 0; // a newer one: its count before the sweep settled it is not known; it is asked about afresh
        return { ...held, attempts, dueAt: Date.now() };
      });
    },

    /**
     * A notification that matched its expectation was accepted: the expectation is settled when its state
     * ends it ({@link settlesExpectation}: `SUCCESSFUL`, not `FAILED`). Settled, it is kept for `ttlMs`
     * ({@link retire}), so that a resend is still recognised as expected.
     *
     * At the claim, within the request (no verification in between): the expectation as checked just before
     * is written, with no read; an `ipn.expect()` landing between the check and this write (the claim's
     * time) is overwritten, as it always was. Later (verified after the claim, or a claim landing after
     * `storeTimeoutMs`), {@link settleLate}.
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

    /**
     * {@link settle}, seconds to minutes after the check (verification ran after the claim, or the claim
     * landed after `storeTimeoutMs`): on what the store holds now, so that an `ipn.expect()` of the
     * transaction meanwhile is not overwritten by the expectation as checked. `verified` is what was
     * credited: the copy, or the service's record delivered in its place.
     *
     * The expectation held (the one checked, or a newer one) is settled, with its own fields. When
     * `verified` contradicts it (an `ipn.expect()` made since, the amount "corrected" to another), that is
     * said now, as it is: `rejected` (reason `mismatch`), its message saying the payment was credited, once,
     * and nothing more will be; settled, that contradiction would pass in silence. It was left due for the
     * sweep, whose query rejected the record as "not credited" (a listener marking the order unpaid, or an
     * operator crediting it by hand, pays twice), or, the service unreachable then, reported the credited
     * payment `stale` ("no final notification"). Already settled (the sweep, which found the key held) or
     * none held (deleted): nothing is written.
     */
    settleLate(n: IpnNotification, checked: ExpectationCheck, verified: IpnNotification = n): void {
      if (checked.kind !== 'match') return;
      void settleHeld(n, checked.expectation, verified);
    },

    /**
     * {@link settleLate}, resolved once written (never rejects: a failure is reported): `ipn.reconcile()`'s
     * settle of the expectation it read before delivering the service's record, whose listeners ran
     * meanwhile (at least once), time for an `ipn.expect()` of the transaction to replace it.
     */
    settleHeld,
  };

  function settleHeld(
    n: IpnNotification,
    expectation: Expectation,
    verified: IpnNotification = n,
  ): Promise<void> {
    if (!expectations || !settlesExpectation(n.state) || isSettled(expectation)) return Promise.resolve();
    const steps = { read: 'settle it', write: `settle the expectation of ${n.transaction_id}` };
    return rewriteHeld(expectations, n, steps, (held) => {
      if (isSettled(held)) return undefined;
      const mismatches = contradictions(held, verified);
      if (mismatches.length > 0) {
        const message =
          `the notification of ${n.transaction_id} was accepted and is credited once (delivered to your listeners), ` +
          `but contradicts its expectation made since it was checked (ipn.expect() again) in ${mismatches.join(', ')}: ` +
          'nothing more is credited; check the payment against the order';
        reject({ reason: 'mismatch', message, mismatches, notification: verified });
      }
      return retired(held, options.ttlMs);
    });
  }
}

/** What {@link createExpectations} returns. */
export type Expectations = ReturnType<typeof createExpectations>;
