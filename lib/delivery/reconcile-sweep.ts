import { randomUUID } from 'node:crypto';
import { messageOf, StatusRateLimitError, StoreError, TransactionNotFoundError } from '../shared/errors.js';
import { isFinalState, type IpnNotification } from '../notification/schema.js';
import type { Expectation, ExpectationStore } from '../stores/expectation-store.js';
import { retryWaitOf, type StatusSource } from '../status/verify-notification.js';
import type { DeliveryContext } from './delivery-context.js';
import type { StaleReason } from './events.js';
import {
  contradictions,
  isSettled,
  REJECTED_ATTEMPTS,
  retire,
  sameExpectation,
  settlesExpectation,
} from './expectations.js';
import { monotonicNow } from '../shared/clock.js';
import { lackingFields } from '../status/status-envelope.js';
import type { Driver } from './durable-delivery.js';

/** The service's rule: at least 15 minutes between two status queries of one transaction. */
export const MIN_QUERY_SPACING_MS = 15 * 60_000;
/** Shortest wait before a query the client refused (budget, block) is tried again. */
const MIN_RETRY_MS = 1_000;
/** Expectations taken from the store at a time. */
const BATCH = 20;
/** How long one sweep may hold the lock before another instance may take over (a crashed sweeper). */
const LOCK_MS = 5 * 60_000;

/**
 * What one sweep did: what `ipn.sweep()` resolves.
 * @inline
 */
export interface SweepResult {
  /**
   * Status queries made: one per API key asked (with several keys, an expectation whose account's key said
   * not found asks the next key too), none for a key whose budget or cool-down refused.
   */
  queried: number;
  /** Expected transactions delivered from the service's record (their events emitted). */
  reconciled: number;
  /** Expected transactions whose record contradicted the expectation (`rejected`). */
  rejected: number;
  /** Expected transactions given up on (`stale`). */
  stale: number;
  /** `false` when another instance held the sweep's lock: this call did nothing. */
  swept: boolean;
}

/** A pass's result, and whether it reached the end of what was due (`false`: stopped by its time, or failed). */
interface SweepPass {
  result: SweepResult;
  finished: boolean;
}

/**
 * The reconciliation sweep: expected transactions with no final notification after `reconcileAfterMs` are
 * asked about through the status client (one at a time, within its budget, at least 15 minutes apart per
 * transaction), delivered from the service's record when final, and reported `stale` after
 * `reconcileAttempts` queries. A `FAILED` record is delivered but, as for a `FAILED` notification, its
 * expectation stays (asked about again, up to `reconcileAttempts` queries, then forgotten): see
 * {@link settlesExpectation}. One instance sweeps at a time: the store's lock.
 */
export function createReconcileSweep<C>(
  context: DeliveryContext<C>,
  expectations: ExpectationStore,
  source: StatusSource | undefined,
  /**
   * Delivers a final record; a `drain` pass leaves a failed attempt's retry to the store's next-attempt time.
   * `'held'`: a copy of the notification was in the inbox, held, and was made due or replaced by the record.
   */
  deliver: (record: IpnNotification, driver: Driver) => Promise<boolean | 'undecided' | 'held'>,
  /**
   * Settles the expectation of a record credited on what the store holds once it was delivered (its
   * listeners ran meanwhile, at least once): an `ipn.expect()` made then keeps its fields, its contradiction
   * said. Without it, the expectation as taken is written.
   */
  settleHeld?: (record: IpnNotification, taken: Expectation) => Promise<void>,
) {
  const { options, emit, logger, reject, report } = context;
  // Made on first use, not while the router is built: a Worker builds it at global scope, where random
  // values are forbidden.
  let owner: string | undefined;
  const spacing = Math.max(options.reconcileAfterMs, MIN_QUERY_SPACING_MS);
  let started = false;
  /** `close()` has begun: a pass takes up no further expectation (see `stop`). */
  let stopping = false;

  function stale(e: Expectation, reason: StaleReason, detail: string, status?: IpnNotification): void {
    const message = `no final notification for expected transaction ${e.transactionId} after ${e.attempts} status queries: ${detail}`;
    logger.warn({ transaction_id: e.transactionId, reason, attempts: e.attempts }, message);
    emit('stale', {
      transactionId: e.transactionId,
      reason,
      message,
      customData: e.customData,
      amount: e.amount,
      expectedAt: new Date(e.expectedAt),
      attempts: e.attempts,
      ...(status ? { status } : {}),
    });
  }

  /** Settles one due expectation; `true` when the pass must stop (the budget is spent). */
  async function settleOne(e: Expectation, result: SweepResult, driver: Driver): Promise<boolean> {
    // A settled one kept for late copies (retire): its time is over, it goes without a query.
    if (isSettled(e)) {
      await expectations.delete(e.transactionId);
      return false;
    }
    const last = e.attempts >= options.reconcileAttempts;
    // Given up on or settled, an expectation is kept for ttlMs more: a late copy is still checked against it.
    const forget = () => retire(expectations, e, options.ttlMs);
    if (source === undefined) {
      result.stale += 1;
      await forget();
      stale(e, 'no_status_client', 'the router has no status client (statusClient or verify) to ask');
      return false;
    }
    let record: IpnNotification;
    // Each key asked is a status query made (with several keys, one not-found under the account named, then
    // the next key): the client tells of each. A source that does not (one of your own) counts one per answer.
    let asked = 0;
    const onQuery = (): void => void (asked += 1);
    try {
      // With several API keys, the key of the account that created it first: another key answers not found.
      record = await (e.account === undefined
        ? source.getStatus(e.transactionId, { onQuery })
        : source.getStatus(e.transactionId, { account: e.account, onQuery }));
      result.queried += Math.max(asked, 1);
    } catch (error) {
      if (error instanceof StatusRateLimitError) {
        // Not an attempt: put it back for when the client may send again, and stop this pass. The keys asked
        // before one refused (the named one's not-found, then the next key's budget spent) made queries.
        result.queried += asked;
        const dueAt = Date.now() + Math.max(retryWaitOf(error), MIN_RETRY_MS);
        await expectations.put({ ...e, attempts: e.attempts - 1, dueAt });
        return true;
      }
      result.queried += Math.max(asked, 1);
      if (!last) return false; // already moved to its next due time
      result.stale += 1;
      await forget();
      const notFound = error instanceof TransactionNotFoundError;
      stale(e, notFound ? 'not_found' : 'unavailable', messageOf(error));
      return false;
    }
    if (!isFinalState(record.state)) {
      if (!last) return false;
      result.stale += 1;
      await forget();
      stale(e, 'not_final', `the service still reports ${record.state}`, record);
      return false;
    }
    const mismatches = contradictions(e, record);
    if (mismatches.length > 0) {
      // An ipn.expect() of the transaction made while the service was asked (the amount corrected) is not
      // written over as rejected: it is due at its own time, and asked about against its own fields then.
      const held = await expectations.get(e.transactionId);
      if (held !== undefined && !isSettled(held) && !sameExpectation(held, e)) return false;
      result.rejected += 1;
      await retire(expectations, e, options.ttlMs, REJECTED_ATTEMPTS);
      const message = `the service's record of ${e.transactionId} contradicts its expectation in ${mismatches.join(', ')}: not credited`;
      reject({ reason: 'mismatch', message, mismatches, notification: record, status: record });
      return false;
    }
    const emitted = await deliver(record, driver);
    if (emitted === 'undecided') {
      // A partial record and a copy kept as unexpected under its key: neither credited nor settled on the
      // held key (the payment would stay kept, never `stale`); asked again, and reported at the bound.
      if (!last) return false;
      result.stale += 1;
      await forget();
      const lacking = lackingFields(record);
      const fields = lacking.length > 0 ? lacking.join(' and ') : 'amount';
      const detail = `the service's record lacks ${fields}: it neither confirms nor contradicts the notification kept as unexpected under its key (once checked, ipn.inbox.replay(key, ['failed']))`;
      stale(e, 'unavailable', detail, record);
      return false;
    }
    // The router's rule: a FAILED keeps the expectation, already moved to its next due time, so a forged
    // SUCCESSFUL is still checked against it and a later turn to SUCCESSFUL is found; forgotten at the bound.
    if (settlesExpectation(record.state)) {
      await (settleHeld ? settleHeld(record, e) : forget());
    } else if (last) {
      await forget();
      logger.info(
        { transaction_id: e.transactionId, state: record.state, attempts: e.attempts },
        `expected transaction still ${record.state} after ${e.attempts} status queries: its expectation is forgotten`,
      );
    }
    if (emitted) {
      result.reconciled += 1;
      logger.info(
        { transaction_id: e.transactionId, state: record.state },
        emitted === 'held'
          ? "expected transaction reconciled through the status query: its notification had arrived and was held under its key (kept as unexpected, or unverified): made due again, or replaced by the service's record where that contradicts it"
          : 'expected transaction reconciled through the status query: its notification never arrived',
      );
    }
    return false;
  }

  /**
   * The expectations of a batch taken that a pass stopped before asking about (`close()` began, or the
   * status client's budget was spent): due again now, their attempt not counted. Left as taken, each waited
   * for its next due time (15 minutes at least) with a query counted that was never made, so that
   * `close()` at each deploy brought a payment nearer to `stale` unasked, and the next process's sweep did
   * not find it. Read first, and put back only as taken: what was written since (settled by a late copy, an
   * `ipn.expect()` again) is kept. A store that fails is reported; that one stays as taken.
   */
  async function putBack(rest: readonly Expectation[]): Promise<void> {
    const now = Date.now();
    for (const e of rest) {
      try {
        const held = await expectations.get(e.transactionId);
        if (held === undefined || !sameExpectation(held, e)) continue;
        if (held.attempts !== e.attempts || held.dueAt !== e.dueAt) continue;
        await expectations.put({ ...held, attempts: held.attempts - 1, dueAt: now });
      } catch (cause) {
        const message = `the sweep failed to put back the expectation of ${e.transactionId} it did not ask about: ${messageOf(cause)}`;
        report(new StoreError(message, { cause }));
      }
    }
  }

  /**
   * One pass; with `until` (monotonic), no new batch is taken after it (a batch taken is settled whole: taking
   * moves its expectations to their next due time; stopped by `close()` or a budget spent, what it did not
   * ask about is put back). `finished` is `false` when it stopped with more maybe due.
   */
  async function pass(until?: number): Promise<SweepPass> {
    const result: SweepResult = { queried: 0, reconciled: 0, rejected: 0, stale: 0, swept: false };
    const stopped = { result, finished: false };
    owner ??= randomUUID();
    if (!(await expectations.lockSweep(owner, LOCK_MS))) return { result, finished: true };
    result.swept = true;
    try {
      for (let first = true; ; first = false) {
        if (!first && until !== undefined && monotonicNow() >= until) return stopped;
        if (stopping) return stopped;
        const now = Date.now();
        const due = await expectations.takeDue(now, now + spacing, BATCH);
        for (const [index, e] of due.entries()) {
          if (stopping || context.isClosed()) {
            await putBack(due.slice(index));
            return stopped;
          }
          try {
            if (await settleOne(e, result, until === undefined ? 'timers' : 'drain')) {
              await putBack(due.slice(index + 1));
              return stopped;
            }
          } catch (cause) {
            // A store or delivery failure: reported; the expectation stays, due again later.
            report(new StoreError(`the sweep failed for ${e.transactionId}: ${messageOf(cause)}`, { cause }));
          }
        }
        if (due.length < BATCH) return { result, finished: true };
      }
    } finally {
      await expectations.unlockSweep(owner);
    }
  }

  const failed = (cause: unknown): SweepPass => {
    report(new StoreError(`the reconciliation sweep failed: ${messageOf(cause)}`, { cause }));
    return { result: { queried: 0, reconciled: 0, rejected: 0, stale: 0, swept: false }, finished: false };
  };
  /** The pass running on this instance, which a second call joins. */
  let running: Promise<SweepPass> | undefined;
  function once(until?: number): Promise<SweepPass> {
    running ??= pass(until)
      .catch(failed)
      .finally(() => {
        running = undefined;
      });
    return running;
  }

  return {
    /** One pass now (or the one running). Never rejects: a store failure is an `error` event. */
    sweep: async (): Promise<SweepResult> => (await once()).result,
    /**
     * `ipn.drain()`'s sweep: one pass that takes no new batch after `until` (monotonic), or the pass running.
     * Never rejects.
     */
    sweepUntil: (until: number): Promise<SweepPass> => once(until),
    /**
     * Starts sweeping every `sweepIntervalMs` (once; later calls do nothing). Marked started only once the
     * interval exists: where timers throw (a global scope), the next first use starts it.
     */
    start(run: () => void): void {
      if (started) return;
      context.every(options.sweepIntervalMs, run);
      started = true;
    },
    /**
     * `close()`'s first step: no further expectation is taken up; resolves once the pass running (its timer's,
     * or `ipn.sweep()`'s) settled, for `close()` to wait for (at most its `timeoutMs`) before it closes the
     * store. A pass's delivery is a claim, then the lifecycle's decision: one that ran into the closed store
     * left the key claimed for `ttlMs` with nothing delivered, the service's resend a duplicate (the payment
     * lost). Never rejects.
     */
    stop(): Promise<void> {
      stopping = true;
      return (running ?? Promise.resolve()).then(() => undefined);
    },
  };
}
