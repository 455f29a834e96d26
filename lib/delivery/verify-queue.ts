import type { DeliveryContext } from './delivery-context.js';
import type { Outcome } from './drain-result.js';
import { keyOf } from './delivery-context.js';
import { StoreError, VerificationError } from '../shared/errors.js';
import type { IpnNotification } from '../notification/schema.js';
import { monotonicNow } from '../shared/clock.js';
import { traceAttempt, tracingActive, type Parent } from '../observability/tracing.js';
import { accountOfNotification } from './accounts.js';
import { expectationAllows, type ExpectationHold } from './expectations.js';
import type { Lifecycle } from './lifecycle.js';
import {
  genuineRecord,
  verifyNotification,
  type StatusSource,
  type Verdict,
} from '../status/verify-notification.js';

const MAX_VERIFY_DELAY = 10 * 60_000;

/** One notification being verified: what verification needs, and what it learnt so far. */
interface Pending {
  notification: IpnNotification;
  arrivedAt: number;
  notFoundAt?: number | undefined;
  /** The account whose API key created the transaction (the router's `accountOf`), when known. */
  account?: string | undefined;
  /** The retry scheduled (its attempt and when it is due, wall clock), until its timer or a drain runs it. */
  retry?: Retry | undefined;
  /**
   * What verification confirmed: the notification, or the service's own record in a forgery's place. Set,
   * a retry only decides its lifecycle again (the store failed to): it is not verified (nor rejected) twice.
   */
  verified?: IpnNotification | undefined;
  /**
   * The service's own record to deliver in a forgery's place, once its expectation allows it: a retry after
   * the store failed to read that expectation only reads it again (the forgery is not rejected twice).
   */
  found?: IpnNotification | undefined;
  /**
   * The notification's expectation: settled once verification confirmed it (or its record in its place),
   * due again when verification gives it up (a sweep meanwhile took its held key for a delivered copy).
   */
  expectation?: ExpectationHold | undefined;
  /**
   * Claimed with no request whose answered work `close()` waits for (a claim that landed after
   * storeTimeoutMs, its request answered 503): its first attempt's listeners are counted as a retry's are.
   */
  unanswered?: boolean | undefined;
}

interface Retry {
  attempt: number;
  dueAt: number;
}

/**
 * At-most-once with `verify`: each accepted notification is emitted once the service confirms it, retried
 * within `verifyAttempts` when the service cannot answer now. Only a verified notification is decided by its
 * transaction's lifecycle (then emitted, or `conflict`): a forgery that verification rejects never touches it,
 * so a forged SUCCESSFUL never turns the genuine FAILED into a conflict, and a forged FAILED of a paid
 * transaction is `rejected`, not a conflict.
 *
 * A copy that the service contradicts in amount or `custom_data` only, for a transaction that did end in that
 * state, is a forgery of a real payment that claimed the key first: the genuine copy was (or will be) a
 * duplicate of that key. So the service's own record is delivered in its place, and the payment is not lost.
 *
 * At most `maxPendingVerifications` notifications wait at once (those reserved by a request being answered
 * included): past it, {@link reserve} refuses, and the router answers 503 before claiming the key.
 */
export function createVerifyQueue<C>(
  context: DeliveryContext<C>,
  source: StatusSource,
  lifecycle: Lifecycle<C>,
) {
  const { options, after, detach, reject, release, report, emitNow, write, logger } = context;
  const max = options.maxPendingVerifications;
  /** Keys being verified, with the notification that claimed each. */
  const pending = new Map<string, Pending>();
  /** Keys reserved by requests not answered yet, with how many requests hold each. */
  const reserved = new Map<string, number>();
  let reservations = 0;
  /** Keys this queue is releasing (nothing credited), until the store answered the release. */
  const releasing = new Set<string>();
  /**
   * Keys released by this queue (nothing credited) while a request held a reservation of them (the release
   * sent during the reservation, or still in flight when it began): that request's claim may have been
   * refused before the release landed, and its copy is then a duplicate of nothing credited. Kept until the
   * key's last reservation is given back, so never more than the reservations.
   */
  const letGoWhileClaimed = new Set<string>();

  const unreserve = (key: string): void => {
    const count = reserved.get(key);
    if (count === undefined) return;
    reservations -= 1;
    if (count > 1) reserved.set(key, count - 1);
    else {
      reserved.delete(key);
      letGoWhileClaimed.delete(key);
    }
  };

  /** Releases `key` (nothing of it credited): a request claiming it meanwhile is told (see `undecided`). */
  const releaseKey = (key: string): void => {
    if (reserved.has(key)) letGoWhileClaimed.add(key);
    releasing.add(key);
    void release(key).finally(() => releasing.delete(key));
  };

  /** One verification attempt, then its emission, retry or end: resolves what it came to (for `drain`). */
  async function verify(entry: Pending, attempt: number): Promise<Outcome> {
    const n = entry.notification;
    const key = keyOf(n);
    if (entry.verified === undefined) {
      if (entry.found === undefined) {
        // Never given up (not_final) on a PENDING cached before it arrived (a forgery of its key's, say).
        const { arrivedAt, notFoundAt, account } = entry;
        const history = { arrivedAt, notFoundAt, account, freshPending: true };
        const verdict = await verifyNotification(source, n, history);
        if (context.isClosed() || pending.get(key) !== entry) return 'other';
        if (verdict.kind === 'later') return later(entry, attempt, verdict);
        if (verdict.kind === 'confirmed') entry.verified = n;
        else {
          reject(verdict.event);
          entry.found = genuineRecord(verdict.event);
        }
      }
      const found = entry.found;
      if (entry.verified === undefined) {
        const allowed = found && (await expectationAllows(context, found));
        if (context.isClosed() || pending.get(key) !== entry) return 'other';
        // The key kept, the expectation read again later: the genuine copy may have been answered as a
        // duplicate of this key meanwhile, and is then nowhere else.
        if (allowed instanceof StoreError)
          return later(entry, attempt, { kind: 'later', reason: allowed, retryAfterMs: 0 });
        if (!allowed || found === undefined) {
          pending.delete(key);
          releaseKey(key); // none of this key to deliver (a genuine copy is still checked when it comes)
          return 'other';
        }
        logger.warn(
          { transaction_id: n.transaction_id, state: n.state },
          'delivered the service record instead',
        );
        entry.verified = found;
      }
    }
    return decideThenEmit(entry, entry.verified, attempt);
  }

  /**
   * A verified notification, decided by its transaction's lifecycle, then emitted (or `conflict`). A store
   * that fails to decide is retried as an unanswered verification is: never emitted undecided.
   */
  async function decideThenEmit(
    entry: Pending,
    verified: IpnNotification,
    attempt: number,
  ): Promise<Outcome> {
    const key = keyOf(entry.notification);
    let conflict: boolean;
    try {
      conflict = (await lifecycle.decideWithin(verified)) === 'conflict';
    } catch (error) {
      if (context.isClosed() || pending.get(key) !== entry) return 'other';
      return later(entry, attempt, { kind: 'later', reason: error, retryAfterMs: 0 });
    }
    if (context.isClosed() || pending.get(key) !== entry) return 'other';
    pending.delete(key);
    entry.expectation?.settle(verified);
    if (conflict) {
      await lifecycle.conflict(verified);
      return 'other';
    }
    // A retry's listeners are those of no request (its timer's), nor are a late claim's (its request was
    // answered 503): close() waits for them as for a first attempt's answered 200 (never sent again, or a
    // duplicate of the key now claimed: a listener cut short by the host's shutdown loses the payment).
    await (attempt > 1 || entry.unanswered === true ? write(emitNow(verified)) : emitNow(verified));
    return 'delivered';
  }

  /** Verification (or the decision after it) could not be made now: retried, or given up. */
  function later(entry: Pending, attempt: number, verdict: Extract<Verdict, { kind: 'later' }>): Outcome {
    const n = entry.notification;
    const key = keyOf(n);
    if (attempt < options.verifyAttempts) {
      entry.notFoundAt = verdict.notFoundAt ?? entry.notFoundAt;
      const backoff = Math.min(options.verifyRetryDelayMs * 2 ** (attempt - 1), MAX_VERIFY_DELAY);
      const delay = Math.max(backoff, verdict.retryAfterMs);
      const retry: Retry = { attempt: attempt + 1, dueAt: Date.now() + delay };
      entry.retry = retry;
      // Run by its timer, unless a drain ran it first (then the timer finds another retry, or none).
      after(delay, () => entry.retry === retry && detach(runRetry(entry, retry)));
      return 'retried';
    }
    pending.delete(key);
    letGo(key, entry.expectation);
    if (verdict.reason instanceof StoreError) report(verdict.reason, entry.found ?? n);
    else giveUp(n, verdict, attempt);
    return 'dead';
  }

  /**
   * Releases `key` and makes its expectation due again (a sweep meanwhile may have taken its held key for a
   * delivered copy and settled it): a resend, `ipn.reconcile()` or the sweep can still deliver it.
   */
  function letGo(key: string, expectation: ExpectationHold | undefined): void {
    releaseKey(key);
    expectation?.reopen();
  }

  /** A notification the router closed over before verifying it: let go, and reported (`error` with it). */
  function closedOver(key: string, n: IpnNotification, expectation: ExpectationHold | undefined): void {
    letGo(key, expectation);
    report(new VerificationError(n.transaction_id, 0, 'the router was closed before it could verify it'), n);
  }

  /** Runs a scheduled retry now: it is no longer scheduled. */
  function runRetry(entry: Pending, retry: Retry): Promise<Outcome> {
    entry.retry = undefined;
    return verify(entry, retry.attempt);
  }

  function giveUp(n: IpnNotification, verdict: Extract<Verdict, { kind: 'later' }>, attempts: number): void {
    if (verdict.pending === undefined) {
      report(new VerificationError(n.transaction_id, attempts, verdict.reason), n);
      return;
    }
    const message = `the service still reports ${verdict.pending.state} for ${n.transaction_id} after ${attempts} attempts`;
    reject({ reason: 'not_final', message, mismatches: ['state'], notification: n, status: verdict.pending });
  }

  return {
    /**
     * Holds a place for a notification about to be claimed; `false` when `maxPendingVerifications` are taken
     * (the router then answers 503 and claims nothing). {@link start} or {@link unreserve} gives it back.
     */
    reserve(key: string): boolean {
      if (pending.size + reservations >= max) return false;
      reservations += 1;
      reserved.set(key, (reserved.get(key) ?? 0) + 1);
      if (releasing.has(key)) letGoWhileClaimed.add(key);
      return true;
    },
    /** Gives back a place {@link reserve} held, for a request that claimed nothing (a resend, a store error). */
    unreserve,
    /**
     * Whether a copy of `key` whose claim was refused (the key held), by a request that still holds its
     * reservation, must not be answered as a plain duplicate: another copy of the key is being verified here
     * (or claimed, about to be), or was let go since this request reserved it. Its fate is not decided: if it
     * is given up (`not_final`, unreachable), a copy answered 200 would be lost, since the service stops
     * resending. The router answers it 503 instead, so that the service resends it once it is decided. Only
     * this instance's copies are known: another instance over the same store answers its copy as a duplicate.
     */
    undecided(key: string): boolean {
      return (
        pending.has(key) || (reserved.get(key) ?? 0) > 1 || releasing.has(key) || letGoWhileClaimed.has(key)
      );
    },
    /** How many notifications are being verified, or reserved. */
    size: (): number => pending.size + reservations,
    /**
     * Verifies a notification just accepted, then emits it (or `rejected`, or `error`). Resolves when the
     * first attempt and its listeners have settled (a retry is scheduled for later); never rejects. Its
     * span (when traced) is a child of `parent`, the request's. `expectation` is settled once it is
     * verified (or the service's record delivered in its place), never for a copy verification gave up on
     * (made due again instead). `unanswered`: claimed with no request's answered work to wait for its
     * listeners (a claim that landed after storeTimeoutMs): `close()` waits for them instead.
     */
    start(
      n: IpnNotification,
      parent?: Parent,
      expectation?: ExpectationHold,
      unanswered = false,
    ): Promise<void> {
      const key = keyOf(n);
      unreserve(key);
      if (context.isClosed()) {
        closedOver(key, n, expectation); // claimed as the router closed (a claim that landed late)
        return Promise.resolve();
      }
      const account = accountOfNotification(options.accountOf, n, logger);
      const entry: Pending = { notification: n, arrivedAt: monotonicNow(), account, expectation, unanswered };
      pending.set(key, entry);
      if (!tracingActive()) return detach(verify(entry, 1));
      // The first verification and emission in a span (see `traceAttempt`); its retries make none.
      return detach(
        traceAttempt(n, key, 1, parent, async (span) => {
          const outcome = await verify(entry, 1);
          span?.end(outcome, outcome === 'retried' || outcome === 'dead' ? outcome : undefined);
          return outcome;
        }),
      );
    },
    /**
     * `ipn.drain()`'s part: runs now every retry due by now (a frozen function's timers may not have fired),
     * and resolves what they came to. A retry that fails again is scheduled as any retry is: kept in memory
     * only, at-most-once, by a timer of the router's. Never rejects.
     */
    async drain(): Promise<Record<Exclude<Outcome, 'other'>, number>> {
      const counts = { delivered: 0, retried: 0, dead: 0 };
      const now = Date.now();
      const due = [...pending.values()].filter(
        (entry) => entry.retry !== undefined && entry.retry.dueAt <= now,
      );
      await Promise.all(
        due.map(async (entry) => {
          const came: { outcome: Outcome } = { outcome: 'other' };
          await detach(
            runRetry(entry, entry.retry as Retry).then((outcome) => void (came.outcome = outcome)),
          );
          if (came.outcome !== 'other') counts[came.outcome] += 1;
        }),
      );
      return counts;
    },
    /**
     * On shutdown: every notification still awaiting verification is reported (`error` with it) and its key
     * released, so that the service's resend, a reconcile or the sweep after the restart delivers it.
     */
    close(): void {
      for (const [key, { notification: n, expectation }] of pending) closedOver(key, n, expectation);
      pending.clear();
    },
  };
}
