import { randomUUID } from 'node:crypto';
import type { DeliveryContext } from './delivery-context.js';
import { identify, idempotencyKeyOf, keyOf } from './delivery-context.js';
import { DeliveryError, IpnKitError, messageOf, StoreError, VerificationError } from '../shared/errors.js';
import type { Notification } from './events.js';
import { ipnNotificationSchema, toRecord, type IpnNotification } from '../notification/schema.js';
import type { Metrics } from '../observability/metrics.js';
import type { AlertMonitor } from '../observability/alerts.js';
import { redactText } from '../observability/redact.js';
import { takeTraceparent, traceAttempt, type AttemptSpan, type Parent } from '../observability/tracing.js';
import type { Attempt as Context } from './safe-emitter.js';
import type {
  DeliveryStatus,
  DeliveryTransaction,
  DurableStore,
  InboxEntry,
  PauseSwitch,
  RolledBack,
} from '../stores/store.js';
import { within } from '../shared/within.js';
import { retentionPass } from './retention.js';
import type { InboxDrain, Outcome } from './drain-result.js';
import { monotonicNow } from '../shared/clock.js';
import { connectionHint } from '../shared/connection-hint.js';
import { genuineRecord, verifyNotification, type Verdict } from '../status/verify-notification.js';
import { accountOfNotification } from './accounts.js';
import { expectationAllows } from './expectations.js';
import { createLifecycle, type Lifecycle } from './lifecycle.js';
import { CONFLICT_PREFIX, UNVERIFIED_PREFIX } from './kept-unexpected.js';

/**
 * Who drives an attempt: the router's `timers` schedule the next attempt of a failed one; a `drain` leaves it
 * to the store's next-attempt time (the next drain, or the timers, take it up), so that it holds no timer.
 */
export type Driver = 'timers' | 'drain';

/** How an attempt ended: `later` is a verification that could not be made yet. */
type Attempt =
  | Exclude<Verdict, { kind: 'confirmed' }>
  | { kind: 'delivered' }
  | { kind: 'failed'; error: IpnKitError; final?: true } // final: dead at once, whatever maxAttempts says
  | { kind: 'conflict' };

/**
 * What an attempt came to once its transaction ended: `marked` delivered (its writes and mark landed),
 * `lost` (another attempt holds the entry: nothing of this one landed), or not delivered.
 */
type Concluded = Exclude<Attempt, { kind: 'delivered' }> | { kind: 'marked' } | { kind: 'lost' };

const MAX_RETRY_DELAY = 60 * 60_000;
const RECOVERY_BATCH = 50;
/** A retry's wake-up that did not see its entry taken up looks again this much later, doubling (see `wake`). */
const LOOK_AGAIN_MS = 25;
/** How many times it looks again (over about 6 s) before leaving the entry to `recoveryIntervalMs`. */
const LOOKS_AGAIN = 8;
/** One look again of a waking retry (see `lookAgain`): its key, its wake-up's token, and what follows it. */
interface Look {
  key: string;
  token: object;
  then: () => void;
}
/** How old a reading of the store's pause switch may be before a delivery reads it again. */
const PAUSE_READ_MS = 1_000;
/** The statuses of an entry an attempt holds: what a paused attempt's put-back may change. */
const UNSETTLED: readonly DeliveryStatus[] = ['received', 'failed'];
/** How often one instance deletes the delivered entries older than `ttlMs` (the dedupe window). */
export const EXPIRY_INTERVAL_MS = 60 * 60_000;

/**
 * At-least-once: the notification was stored before the 200; each attempt verifies it (with `verify`),
 * awaits every listener, and records the outcome: delivered, failed (retried with backoff), dead after
 * `maxAttempts`. Entries left due or abandoned (a retry, a replay, a crash) are taken up by `recover`.
 * `unconfirmed` is told of a notification verification gave up on (dead unverified) or rejected without a
 * record to deliver in its place (its key released): its expectation, settled at the claim, is due again.
 */
export function createDurableDelivery<C>(
  context: DeliveryContext<C>,
  inbox: DurableStore,
  metrics?: Metrics,
  lifecycle: Lifecycle<C> = createLifecycle(context, undefined),
  alerts?: AlertMonitor,
  unconfirmed?: (n: IpnNotification) => void,
) {
  const { options, logger, emit, emitAndWait, toEvent, report, reject, after } = context;
  let leasedOnce = false; // a recovery pass has leased: the store is ready
  let expiredAt = -Infinity; // when this instance last deleted the expired delivered entries (monotonic)

  /**
   * Retention: at most once an hour, a recovery pass (or a drain) deletes the entries delivered more than
   * `ttlMs` ago, as `purge` does, and the dead ones older than `retention.deadMs`, and blanks the customer's
   * data older than `retention.personalDataMs` (see retention.ts). A resend within `ttlMs` of its delivery is
   * still a duplicate, and `received` and `failed` entries are never touched. Runs beside the pass; a failure
   * is reported.
   */
  function expire(): void {
    if (monotonicNow() - expiredAt < EXPIRY_INTERVAL_MS) return;
    expiredAt = monotonicNow();
    timed(
      Promise.resolve().then(() => retentionPass(inbox, options.ttlMs, options.retention)),
      'purge',
    ).then(
      ({ delivered, dead, redacted }) => {
        if (delivered + dead + redacted > 0)
          logger.debug(
            { delivered, dead, redacted },
            `retention: deleted ${delivered} delivered notification(s) older than ttlMs and ${dead} dead one(s) ` +
              `older than retention.deadMs; blanked the customer's data in ${redacted}`,
          );
      },
      (cause: unknown) =>
        report(
          new StoreError(`the store failed to delete expired delivered notifications: ${messageOf(cause)}`, {
            cause,
          }),
        ),
    );
  }
  let warnedMissing = false;

  /** Emits and waits for every listener: delivered only when at least one ran and none failed. */
  async function emitAndSettle(n: IpnNotification, context: Context): Promise<Attempt> {
    const event = toEvent(n);
    const own =
      event.state === 'SUCCESSFUL'
        ? emitAndWait('successful', event as Notification<C> & { state: 'SUCCESSFUL' }, context)
        : event.state === 'FAILED'
          ? emitAndWait('failed', event as Notification<C> & { state: 'FAILED' }, context)
          : undefined;
    const general = emitAndWait('notification', event, context);
    // Listeners that returned no promise answer at once: nothing to wait for.
    const results =
      general instanceof Promise || own instanceof Promise
        ? await Promise.all([general, own])
        : [general, own];
    const failures = results.flatMap((result) => result?.failures ?? []);
    if (failures.length > 0) {
      // One error for the attempt, carrying the listeners' own messages (redacted as logs are): the
      // inbox's last error and `dead.lastError` say what went wrong, not only that something did.
      const said = failures.map((failure) => failure.message).join('; ');
      const message = options.logCustomerData ? said : redactText(said, n);
      return { kind: 'failed', error: new DeliveryError(message, { cause: failures[0] }) };
    }
    if (results.every((result) => (result?.listeners ?? 0) === 0)) {
      const name = event.state === 'FAILED' ? 'failed' : 'successful';
      const message = `no listener for ${keyOf(n)}: add ipn.on('${name}', ...) before the router starts`;
      return { kind: 'failed', error: new DeliveryError(message) };
    }
    return { kind: 'delivered' };
  }

  /** Verifies, then (in the store's transaction, when it opens one) emits to every listener. */
  async function attempt(n: IpnNotification, context: Context, tx: TransactionHolder): Promise<Attempt> {
    const attempts = context.attempt;
    if (options.verify) {
      // No answer older than this attempt condemns it; a not-found is believed from the second attempt on.
      const now = monotonicNow();
      const verdict = await verifyNotification(options.verify, n, {
        arrivedAt: now,
        notFoundAt: attempts > 1 ? now : undefined,
        freshPending: true,
        account: accountOfNotification(options.accountOf, n, logger),
      });
      if (verdict.kind !== 'confirmed') return verdict;
    }
    // Decided at every attempt, after verification: a FAILED retried (or replayed) after its transaction's
    // SUCCESSFUL was accepted meanwhile is a conflict, never a failure emitted after the success. A store
    // failure here is a failed attempt, retried.
    try {
      if ((await lifecycle.decideWithin(n)) === 'conflict') return { kind: 'conflict' };
    } catch (error) {
      return { kind: 'failed', error: error as StoreError };
    }
    const opened = await tx.open();
    if (opened === undefined) return emitAndSettle(n, context);
    opened.onLateWrite?.((error) => report(error, n)); // a listener's write after the attempt ended
    const shared = opened.db === undefined ? { tx: opened.tx } : { tx: opened.tx, db: opened.db };
    return emitAndSettle(n, { ...context, ...shared });
  }

  /**
   * One attempt at `n`, held by `leaseId`; resolves whether it was delivered. Never rejects. Its span (when
   * traced) is a child of `parent`, the request's.
   */
  async function deliver(
    key: string,
    n: IpnNotification,
    leaseId: string,
    attempts: number,
    driver: Driver = 'timers',
    parent?: Parent,
  ): Promise<boolean> {
    if (await pausedNow(false)) {
      await park(key, n, leaseId, driver);
      return false;
    }
    return (await tracedAttempt(key, n, leaseId, attempts, driver, parent)) === 'delivered';
  }

  /**
   * {@link attemptOnce} in a span of its own when traces are on (see `traceAttempt`): a child of the
   * request's span in this process, or linked to it through the `traceparent` kept with the entry.
   */
  function tracedAttempt(
    key: string,
    n: IpnNotification,
    leaseId: string,
    attempts: number,
    driver: Driver,
    parent: Parent | undefined,
  ): Promise<Outcome> {
    return traceAttempt(n, key, attempts, parent, (span) =>
      attemptOnce(key, n, leaseId, attempts, driver, span),
    );
  }

  /**
   * Whether `pause()` holds delivery. With the store's `pauseSwitch`: every instance's, as last read from
   * the store (read again before a delivery once `PAUSE_READ_MS` old, and by every recovery pass); without
   * it, this instance's own.
   */
  let paused = false;
  const pauseSwitch = inbox.pauseSwitch;
  /** When the switch was last read (monotonic), and how many times this instance changed it since start. */
  let pauseReadAt = -Infinity;
  let pauseChanges = 0;
  /** Writes of the switch on their way: meanwhile this instance's own value holds, unread. */
  let pauseWrites = 0;
  /** The read of the switch on its way, if one is. */
  let pauseReading: Promise<boolean> | undefined;

  /**
   * Whether delivery is paused now: the switch read afresh when `fresh` or when the last reading is older
   * than `PAUSE_READ_MS`. A failed read keeps what was known (the store's failure shows in the attempt
   * itself), and a reading that began before this instance changed the switch is not taken over the change.
   */
  async function pausedNow(fresh: boolean): Promise<boolean> {
    if (pauseSwitch === undefined || pauseWrites > 0) return paused;
    if (!fresh && monotonicNow() - pauseReadAt < PAUSE_READ_MS) return paused;
    // One read at a time: the deliveries that find the reading old while a slow one is on its way join it.
    pauseReading ??= readPauseSwitch(pauseSwitch).finally(() => {
      pauseReading = undefined;
    });
    return pauseReading;
  }

  async function readPauseSwitch(from: PauseSwitch): Promise<boolean> {
    const changes = pauseChanges;
    // A reading is as old as the moment it was asked: a slow answer may predate another instance's pause().
    const askedAt = monotonicNow();
    try {
      const value = await timed(from.read(), 'pauseSwitch.read');
      if (changes === pauseChanges) paused = value === true;
    } catch {
      // Kept as it was: a store that cannot answer cannot deliver either.
    }
    pauseReadAt = Math.max(pauseReadAt, askedAt);
    return paused;
  }

  /**
   * `pause()` and `resume()`: this instance at once, then every instance over the store's switch. When the
   * switch cannot be written, nothing changed: this instance goes back to what it held (unless a later
   * pause or resume came meanwhile) and reads the switch afresh before its next delivery (a write that timed
   * out may have landed: the store's flag is what every instance follows).
   */
  async function setPaused(value: boolean): Promise<void> {
    const before = paused;
    paused = value;
    const change = ++pauseChanges;
    if (pauseSwitch === undefined) return;
    pauseWrites += 1;
    try {
      await timed(pauseSwitch.write(value), 'pauseSwitch.write');
    } catch (cause) {
      if (change === pauseChanges) paused = before;
      pauseReadAt = -Infinity;
      const what = value ? 'pause' : 'resume';
      const message = `the store failed to keep the ${what} for every instance: nothing ${value ? 'paused' : 'resumed'} (${messageOf(cause)})`;
      throw new StoreError(message, { cause });
    } finally {
      pauseWrites -= 1;
    }
  }

  /**
   * A notification stored while paused: given back to the inbox, `failed` with attempts 0 and its last error
   * saying so, due now (its lease ended), for the first pass after `resume()`. Attempts go back to 0 first,
   * while this attempt's lease still holds the entry (a replay keeps a live lease): no other pass can take it
   * up between the two writes, and nothing is written once the lease has ended (a replay landing after a
   * pass delivered it would make a delivered entry due again: delivered twice). The put-back itself only
   * changes an entry still `received` or `failed`: one that lands late (a slow store, its lease ended
   * meanwhile and another instance delivered the entry or gave it up) changes nothing. Resumed meanwhile, a pass is
   * asked for: the resume's own may have looked before the entry was due. A store failure is reported; the
   * entry then waits for its lease to run out, and is taken up all the same.
   */
  async function park(key: string, n: IpnNotification, leaseId: string, driver: Driver): Promise<void> {
    try {
      await timed(inbox.replay(key, 0, UNSETTLED), 'replay', key);
      const error = 'delivery paused (ipn.pause()): delivered on resume';
      await timed(
        inbox.settle(key, leaseId, { status: 'failed', error, nextAttemptAt: new Date() }),
        'settle',
        key,
      );
    } catch (cause) {
      const message = `the store failed to put ${key} back while paused: ${messageOf(cause)}`;
      report(new StoreError(message, { cause }), n);
    }
    if (!paused && driver === 'timers') recover();
  }

  /**
   * One attempt at `n`, held by `leaseId`; resolves what it came to. Never rejects. Classify, then settle:
   * the attempt runs (verification, then the listeners, in the store's transaction when it opens one); its
   * transaction is committed or rolled back, which says whether it delivered; then the entry is settled
   * through one store call, guarded by the lease.
   */
  async function attemptOnce(
    key: string,
    n: IpnNotification,
    leaseId: string,
    attempts: number,
    driver: Driver,
    span?: AttemptSpan,
  ): Promise<Outcome> {
    metrics?.attempt();
    try {
      const { result, tx, abandoned } = await run(key, n, leaseId, attempts);
      // A landed commit found only after the rollback outran storeTimeoutMs: settled dead then, while this
      // attempt's lease still holds the entry (a retry would write the listeners' writes again).
      // A store write nobody awaits: close() waits for it.
      const late = (landed: Concluded): void =>
        void context.write(
          settle(key, n, leaseId, attempts, driver, landed).catch((cause: unknown) => {
            const message = `the store failed to record the delivery of ${key}: ${messageOf(cause)}`;
            report(new StoreError(message, { cause }), n);
          }),
        );
      const concluded = await conclude(key, result, tx, abandoned, late);
      const outcome = await settle(key, n, leaseId, attempts, driver, concluded);
      span?.end(spanOutcome(outcome, concluded), failureOf(concluded));
      return outcome;
    } catch (cause) {
      // The entry is still in the inbox (every write above changes it in one step, none deletes a
      // notification still to deliver): its lease runs out and it is taken up again. At least once.
      const message = `the store failed to record the delivery of ${key}: ${messageOf(cause)}`;
      const error = new StoreError(message, { cause });
      report(error, n);
      alerts?.attempt(false, key, error.message);
      span?.end('store_failed', error.message);
      return 'other';
    }
  }

  /**
   * Runs the attempt (verification, then the listeners within 90% of `leaseMs`): what it came to, and its
   * transaction. Never rejects.
   */
  async function run(key: string, n: IpnNotification, leaseId: string, attempts: number) {
    const tx = holdTransaction(inbox, key, leaseId, (pending) => timed(pending, 'begin', key));
    const ms = Math.floor(options.leaseMs * 0.9);
    const context = { key, idempotencyKey: idempotencyKeyOf(key), attempt: attempts };
    const running = attempt(n, context, tx);
    let result: Attempt;
    let abandoned: Promise<unknown> | undefined; // the listeners may still be running: settles when they have
    try {
      const late = () =>
        new DeliveryError(`the listeners of ${key} did not settle within ${ms} ms (leaseMs)`);
      result = await within(running, ms, late);
    } catch (error) {
      const failure =
        error instanceof IpnKitError ? error : new DeliveryError(messageOf(error), { cause: error });
      result = { kind: 'failed', error: failure };
      abandoned = running.catch(() => {});
    }
    return { result, tx, abandoned };
  }

  /**
   * Ends the attempt's transaction and says what the attempt came to: a delivered attempt commits (its
   * listeners' writes and the `delivered` mark together), any other rolls back. A commit whose outcome is
   * unknown is settled by reading the entry, never by guessing. Rejects when the store failed in a way
   * that leaves the entry to its lease (reported by the caller).
   */
  async function conclude(
    key: string,
    result: Attempt,
    tx: TransactionHolder,
    abandoned: Promise<unknown> | undefined,
    late: (landed: Concluded) => void,
  ): Promise<Concluded> {
    const open = tx.current();
    if (result.kind !== 'delivered') {
      /** Not all of them: a listener committed the transaction itself. Dead at once, never retried. */
      const landedOf = (rolledBack: unknown): Concluded | undefined => {
        const words = wordsOf(rolledBack);
        if (words === undefined || result.kind !== 'failed') return undefined;
        return landed(`${result.error.message}; ${words}`, result.error);
      };
      const ending = tx.end(abandoned); // the listeners' writes vanish
      // An abandoned attempt's rollback may wait for a listener's query still running on tx (its COMMIT
      // may be about to land): the words say so, rather than blame the store.
      const call = abandoned ? "rollback (waiting for a listener's query still running on tx)" : 'rollback';
      const rolledBack = await timed(ending, call, key).catch((cause: unknown) => {
        ending.then(
          (later) => {
            const concluded = landedOf(later);
            if (concluded) late(concluded);
          },
          () => {},
        );
        throw cause;
      });
      return landedOf(rolledBack) ?? result;
    }
    if (!open) {
      // No transaction: the mark alone. Its failure is the store's, never a failed attempt.
      const settled = await timed(inbox.settle(key, leaseId(tx), { status: 'delivered' }), 'settle', key);
      return { kind: settled ? 'marked' : 'lost' };
    }
    const idle = open.state === 'idle'; // no listener wrote in it: the commit is the mark alone
    try {
      const committed = await timed(open.commit(), 'commit', key);
      const words = wordsOf(committed);
      if (words !== undefined) return landed(words);
      return { kind: committed === 'delivered' ? 'marked' : 'lost' };
    } catch (cause) {
      if (idle) throw cause; // the store's failure: the entry is taken up again once its lease runs out
      // A commit still on its way (it timed out) is not waited for: its connection is closed.
      tx.end(abandoned ?? Promise.resolve()).catch(() => {});
      const entry = await timed(inbox.get(key), 'get', key);
      if (entry?.status === 'delivered') return { kind: 'marked' }; // the commit landed; its answer did not
      // Neither landed. A failed attempt like any other, so that one that a listener makes fail every time
      // ends dead after maxAttempts instead of being taken up again without end.
      const message = `the delivery transaction of ${key} did not commit: ${messageOf(cause)}`;
      const error = cause instanceof IpnKitError ? cause : new DeliveryError(message, { cause });
      return { kind: 'failed', error };
    }
  }

  /**
   * Whether an entry this attempt just settled dead unverified was made due again by a copy of its key during
   * the attempt (its attempts put back to 0: a lease counts 1 or more), and is now due again. A store that
   * fails to tell leaves it dead (reported), as it was.
   */
  async function redeemedMeanwhile(key: string): Promise<boolean> {
    try {
      const entry = await timed(inbox.get(key), 'get', key);
      if (entry?.status !== 'dead' || entry.attempts !== 0) return false;
      return await timed(inbox.replay(key, 0, ['dead']), 'replay', key);
    } catch (cause) {
      report(new StoreError(`the store failed to read ${key} once dead: ${messageOf(cause)}`, { cause }));
      return false;
    }
  }

  /** A listener's writes landed, or may have, outside the delivery's transaction: dead at once, never retried. */
  function landed(message: string, cause?: IpnKitError): Concluded {
    return { kind: 'failed', error: new DeliveryError(message, { cause }), final: true };
  }

  /** Settles the entry as the attempt concluded, through one store call guarded by the lease. */
  async function settle(
    key: string,
    n: IpnNotification,
    leaseId: string,
    attempts: number,
    driver: Driver,
    result: Concluded,
  ): Promise<Outcome> {
    if (result.kind === 'marked') {
      metrics?.delivered(n.state);
      alerts?.attempt(true, key);
      return 'delivered';
    }
    // The lease was lost (another attempt holds the entry): the holder of the lease delivers it.
    if (result.kind === 'lost') return 'other';
    if (result.kind === 'conflict') {
      // Kept as dead, its last error saying why: where an operator looks (the CLI, the operator's page),
      // replayable, and a replay decides it again: a conflict again, never `failed`.
      const message = await lifecycle.conflict(n);
      const kept = { status: 'dead', error: `${CONFLICT_PREFIX} ${message}` } as const;
      await timed(inbox.settle(key, leaseId, kept), 'settle', key);
      return 'other';
    }
    if (result.kind === 'rejected') {
      reject(result.event);
      const found = genuineRecord(result.event);
      const allowed = found && (await expectationAllows(context, found));
      // A failed attempt, retried (dead after maxAttempts, replayable), never the entry released: the genuine
      // copy may have been answered as a duplicate of this key, and the inbox is then all that holds it.
      if (allowed instanceof StoreError)
        return settle(key, n, leaseId, attempts, driver, { kind: 'later', reason: allowed, retryAfterMs: 0 });
      const genuine = allowed === true ? found : undefined;
      if (!genuine) {
        // A genuine notification of this key can still come. Only while this attempt holds the entry:
        // another one may have put the service's own record there since. Its expectation, settled at the
        // claim, is due again (as the at-most-once queue's `letGo`): the genuine copy may have been answered
        // as a duplicate of this key meanwhile, and only the sweep's query finds it then.
        await timed(inbox.release(key, leaseId), 'release', key);
        unconfirmed?.(n);
        return 'other';
      }
      // The genuine copy came already, answered as a duplicate of the forgery: the service's own record
      // takes the forgery's place in one step, so that it is in the inbox at every moment.
      const lease = { id: randomUUID(), ms: options.leaseMs };
      if (await timed(inbox.replace(key, leaseId, toRecord(genuine), lease), 'replace', key))
        return tracedAttempt(key, genuine, lease.id, 1, driver, undefined);
      return 'other';
    }
    const failure =
      result.kind === 'failed'
        ? withHint(result.error)
        : new VerificationError(n.transaction_id, attempts, result.reason);
    // Unverified (a `later`), its last error is the VerificationError's, by which a copy arriving for its key
    // makes it due again, attempts from 0 (see `isUnverified`); a failed attempt's (a listener's message,
    // which may say anything) never starts as that one does: such an entry may hold a credit.
    const said =
      result.kind === 'failed' && failure.message.startsWith(UNVERIFIED_PREFIX)
        ? `failed: ${failure.message}`
        : failure.message;
    if (result.kind === 'failed') report(failure, n);
    alerts?.attempt(false, key, failure.message);
    if (attempts >= options.maxAttempts || (result.kind === 'failed' && result.final)) {
      // Emitted by the instance that still held the lease, only: a replay may have taken it meanwhile.
      const dead = { status: 'dead', error: said } as const;
      if (!(await timed(inbox.settle(key, leaseId, dead), 'settle', key))) return 'other';
      // A copy of the key that came during this attempt made the entry due again (attempts 0, this
      // attempt's live lease kept), and this settle wrote `dead` over it: made due again now, else the
      // genuine copy, answered as a duplicate, is lost to this attempt's verdict.
      if (result.kind === 'later' && (await redeemedMeanwhile(key))) {
        if (driver === 'timers') wake(key, 0);
        return 'retried';
      }
      if (result.kind === 'later') unconfirmed?.(n);
      logger.error(
        { ...identify(n), attempts, event: 'dead' },
        `IPN notification ${key} is dead after ${attempts} attempt${attempts === 1 ? '' : 's'}`,
      );
      emit('dead', { key, notification: toEvent(n), attempts, lastError: failure.message });
      return 'dead';
    }
    // Never sooner than the verdict's `retryAfterMs` (the status client's guard: its budget, a block's
    // cool-down, a newer answer asked for too soon), as the at-most-once queue waits: an attempt before it
    // is refused again, and spends one of `maxAttempts` on a query never sent.
    const backoff = Math.min(options.retryDelayMs * 2 ** (attempts - 1), MAX_RETRY_DELAY);
    const delay = result.kind === 'later' ? Math.max(backoff, result.retryAfterMs) : backoff;
    const nextAttemptAt = new Date(Date.now() + delay);
    const failed = { status: 'failed', error: said, nextAttemptAt } as const;
    const settled = await timed(inbox.settle(key, leaseId, failed), 'settle', key);
    if (driver === 'timers' && settled) wake(key, delay);
    return settled ? 'retried' : 'other';
  }

  /**
   * The retries whose wake-up has not seen them taken up yet, each with its wake-up's own token (a later
   * failure of the same key starts a new one). Taking an entry up removes it.
   */
  const waking = new Map<string, object>();

  /**
   * The looks again of every waking retry, by the time they run at (monotonic): each time is a multiple of its
   * gap, so that the looks of many retries that failed close together (an outage of the ledger) run as one
   * recovery pass each, not one pass per retry: about 9 per failure otherwise, each a lease query.
   */
  const looks = new Map<number, Look[]>();

  /**
   * Runs `then` after about `gap` ms, after one recovery pass shared with every look due at that time; no
   * pass when each of their retries was taken up meanwhile.
   */
  function lookAgain(key: string, token: object, gap: number, then: () => void): void {
    const at = Math.ceil((monotonicNow() + gap / 2) / gap) * gap;
    let due = looks.get(at);
    if (due === undefined) {
      const shared: Look[] = [];
      due = shared;
      looks.set(at, shared);
      after(at - monotonicNow(), () => {
        looks.delete(at);
        const waiting = shared.filter((look) => waking.get(look.key) === look.token);
        if (waiting.length > 0) recover();
        for (const look of waiting) look.then();
      });
    }
    due.push({ key, token, then });
  }

  /**
   * A failed attempt's wake-up: a recovery pass once its retry is due. That pass can come before the entry
   * is due by the store's clock (a timer fires up to an event-loop turn early, and PostgreSQL, MySQL and Redis
   * judge `nextAttemptAt` by their own clock, which may be behind this one) and take nothing; then the retry
   * would wait for `recoveryIntervalMs`. Until a pass takes the entry up, the wake-up looks again about 25 ms
   * later, doubling, 8 times (about 6 s), and leaves a larger gap between the clocks to the recovery interval.
   * The looks again are shared between retries (see `lookAgain`).
   */
  function wake(key: string, delay: number): void {
    const token = {};
    waking.set(key, token);
    const look = (count: number): void => {
      if (waking.get(key) !== token) return; // taken up, or a later failure woke it again
      if (count >= LOOKS_AGAIN) {
        waking.delete(key);
        return;
      }
      lookAgain(key, token, LOOK_AGAIN_MS * 2 ** count, () => look(count + 1));
    };
    after(delay, () => {
      if (waking.get(key) !== token) return; // a later failure woke it again
      recover();
      look(0);
    });
  }

  /**
   * One lease of due and abandoned entries, each attempted; resolves the batch's counts, or `undefined` when
   * the store failed to hand them out (reported). Never rejects.
   */
  /** A recovery pass, unless delivery is paused (the switch read afresh): then it leases nothing. */
  async function unlessPaused(driver: Driver): Promise<(InboxDrain & { taken: number }) | undefined> {
    if (await pausedNow(true)) return { delivered: 0, retried: 0, dead: 0, left: 1, taken: 0 };
    return takeUp(driver);
  }

  async function takeUp(driver: Driver): Promise<(InboxDrain & { taken: number }) | undefined> {
    const counts = { delivered: 0, retried: 0, dead: 0, left: 0, taken: 0 };
    const lease = { id: randomUUID(), ms: options.leaseMs };
    let entries: InboxEntry[];
    try {
      const handed: unknown = await timed(inbox.lease(lease, RECOVERY_BATCH), 'lease');
      // A custom store's slip (no list, a null in it) is its failure, reported: never a TypeError that
      // would reject the recovery timer's chain, an unhandled rejection that stops the host process.
      if (!Array.isArray(handed) || !handed.every(isEntry)) {
        const what = Array.isArray(handed) ? 'a list holding a non-entry' : String(handed);
        throw new StoreError(`lease() resolved ${what}, not a list of entries`);
      }
      entries = handed;
    } catch (cause) {
      if (!leasedOnce && cause instanceof StoreError && cause.notMigrated) {
        // At start, before the table is made (a migrate() still to come): one calm line, not an error
        // with a stack on every pass. Once a pass has leased, a missing table is an error like any other.
        if (!warnedMissing) logger.warn({}, `${messageOf(cause)}; recovery starts once it exists`);
        warnedMissing = true;
        return undefined;
      }
      const message = `the store failed to hand out undelivered notifications: ${messageOf(cause)}`;
      report(new StoreError(message, { cause }));
      return undefined;
    }
    leasedOnce = true;
    for (const entry of entries) waking.delete(entry.key);
    if (typeof inbox.purge === 'function') expire();
    counts.taken = entries.length;
    const outcomes = await Promise.all(
      entries.map(async (entry): Promise<Outcome> => {
        // The request's span, kept with the entry while traces were on: the attempt's span links to it.
        const { record, parent } = takeTraceparent(entry.record);
        const read = ipnNotificationSchema.safeParse(record);
        if (read.success && entry.attempts > options.maxAttempts) {
          // Its last attempts never settled (their process died, or lost its connection, each time): dead,
          // not taken up without end. This lease counted one more, which does not run.
          const error = new DeliveryError(unsettled(entry));
          return settle(entry.key, read.data, lease.id, entry.attempts - 1, driver, {
            kind: 'failed',
            error,
          });
        }
        if (read.success)
          return tracedAttempt(entry.key, read.data, lease.id, entry.attempts, driver, parent);
        const error = `the stored record of ${entry.key} is not a notification`;
        try {
          const settled = await timed(inbox.settle(entry.key, lease.id, { status: 'dead', error }), 'settle');
          return settled ? 'dead' : 'other';
        } catch (cause) {
          report(
            new StoreError(`the store failed to record ${entry.key} dead: ${messageOf(cause)}`, { cause }),
          );
          return 'other';
        }
      }),
    );
    for (const outcome of outcomes) if (outcome !== 'other') counts[outcome] += 1;
    return counts;
  }

  /** The batch being taken up (by the timers or a drain): never two at once on this instance. */
  let running: Promise<unknown> | undefined;
  /** `close()` has begun: no new batch is taken up (one would run on into a closed store). */
  let stopping = false;
  /** A `recover()` came while a batch was running: one more pass follows it (see `exclusively`). */
  let again = false;
  function exclusively<T>(pending: Promise<T>): Promise<T> {
    const over = (): void => {
      running = undefined;
      // A `recover()` came while this batch ran (a retry's wake-up, a replay): one more pass, whichever
      // batch this was (the timers' or a drain's, which schedules nothing of its own).
      if (again) {
        again = false;
        after(0, recover);
      }
    };
    running = pending.then(over, over); // never rejects: the caller handles `pending`'s own failure
    return pending;
  }

  /** Takes up due and abandoned entries and delivers them; one run at a time. */
  function recover(): void {
    // Paused, a pass still runs: it reads the switch (another instance may have resumed) and leases nothing.
    if (stopping || (paused && pauseSwitch === undefined) || context.isClosed()) return;
    if (running !== undefined) {
      // A pass is running: it may have looked before this call's entry (a retry) was due. Run once more
      // after it, rather than leave the entry to the next recoveryIntervalMs.
      again = true;
      return;
    }
    exclusively(unlessPaused('timers')).then(
      (counts) => {
        if (counts?.taken === RECOVERY_BATCH) after(0, recover); // more are waiting
      },
      (cause: unknown) => {
        // A bug of ours (takeUp never rejects): reported, never an unhandled rejection.
        const message = `ipn-kit failed to take up undelivered notifications: ${messageOf(cause)}`;
        report(new IpnKitError('IPN_INTERNAL', message, { cause }));
      },
    );
  }

  /**
   * `ipn.drain()`'s inbox part: batch after batch of due and abandoned entries until one comes back short of a
   * full batch, the store fails, or `deadline` (monotonic) has passed; the first batch runs whatever the
   * budget. Waits for a batch the timers are running first. Schedules nothing: it leaves no timer.
   */
  async function drain(deadline: number): Promise<InboxDrain> {
    const totals: InboxDrain = { delivered: 0, retried: 0, dead: 0, left: 0 };
    for (let first = true; ; first = false) {
      while (running !== undefined) await running;
      if (stopping || context.isClosed()) return totals;
      if (await pausedNow(true)) {
        totals.left = 1; // held by pause(): taken up on resume()
        return totals;
      }
      if (!first && monotonicNow() >= deadline) {
        totals.left = 1; // the last batch was full: more may be due
        return totals;
      }
      const counts = await exclusively(takeUp('drain'));
      if (counts === undefined) {
        totals.left = 1; // the store could not say what is due
        return totals;
      }
      totals.delivered += counts.delivered;
      totals.retried += counts.retried;
      totals.dead += counts.dead;
      if (counts.taken < RECOVERY_BATCH) return totals;
    }
  }

  /**
   * Waits for a store call at most `storeTimeoutMs`: a call that never settles (a connection stuck behind a
   * dropped network) must not hold an attempt, or stop recovery for good. What it did meanwhile is safe:
   * every write is guarded by the lease, and an entry leased by a call that timed out is taken up again
   * once that lease runs out.
   */
  function timed<T>(pending: T | Promise<T>, call: string, key?: string): Promise<T> {
    // The message is written only when the time runs out: this bounds every store call of every attempt.
    return within(pending, options.storeTimeoutMs, () => {
      const about = key === undefined ? '' : ` for ${key}`;
      const message = `the store's ${call}${about} did not answer within ${options.storeTimeoutMs} ms (storeTimeoutMs)`;
      return new StoreError(message);
    });
  }

  /**
   * `close()`'s first step: no batch is taken up from now on (by the timers or a drain), and the one running
   * is waited for, so that its listeners and bookkeeping finish while the store is still open. Resolves once
   * that batch settled (each attempt is bounded by `leaseMs`, each store call by `storeTimeoutMs`); never
   * rejects.
   */
  function stop(): Promise<void> {
    stopping = true;
    return Promise.resolve(running).then(
      () => undefined,
      () => undefined,
    );
  }

  let started = false;
  /**
   * Starts recovery: a first pass soon (after the caller's synchronous code, which adds the listeners), then
   * every `recoveryIntervalMs`. Not at construction: a Worker builds the router at global scope, where
   * timers are forbidden. Later calls do nothing.
   */
  function start(): void {
    if (started || context.isClosed()) return;
    // Each pass also reads the backlog for the alerts: a no-op while nothing listens to them.
    const pass = alerts
      ? (): void => {
          recover();
          void alerts.checkInbox(inbox);
        }
      : recover;
    after(0, pass);
    context.every(options.recoveryIntervalMs, pass);
    started = true;
  }

  return {
    deliver,
    recover,
    start,
    drain,
    stop,
    pause: () => setPaused(true),
    resume: () => setPaused(false),
    isPaused: (): boolean => paused,
  };
}

/**
 * What an attempt's span says it came to: the outcome counted (`delivered`, `retried`, `dead`), or, for the
 * others, how it concluded (`lost`: another attempt holds the entry; `conflict`; `rejected`; `later`).
 */
function spanOutcome(outcome: Outcome, concluded: Concluded): string {
  if (outcome !== 'other') return outcome;
  return concluded.kind === 'marked' ? 'delivered' : concluded.kind;
}

/** Why an attempt did not deliver, for its span's status (scrubbed there): `undefined` when it did. */
function failureOf(concluded: Concluded): string | undefined {
  if (concluded.kind === 'failed') return concluded.error.message;
  if (concluded.kind === 'marked' || concluded.kind === 'lost') return undefined;
  return concluded.kind;
}

/** Whether a value a store's `lease()` handed out can be taken up: an object with a string key. */
function isEntry(value: unknown): value is InboxEntry {
  return typeof value === 'object' && value !== null && typeof (value as { key?: unknown }).key === 'string';
}

/** One attempt's transaction: opened (when the store opens one) after verification, before the listeners. */
interface TransactionHolder {
  readonly leaseId: string;
  open(): Promise<DeliveryTransaction | undefined>;
  current(): DeliveryTransaction | undefined;
  /**
   * Rolls back what was opened (`listeners`: an abandoned attempt's, which may still be running); one that
   * opens later (the attempt timed out meanwhile) is rolled back at once. `{ landed }`: see `rollback()`.
   */
  end(listeners?: Promise<unknown>): Promise<void | RolledBack>;
}

const leaseId = (tx: TransactionHolder): string => tx.leaseId;

function holdTransaction(
  inbox: DurableStore,
  key: string,
  leaseId: string,
  bound: <T>(pending: Promise<T>) => Promise<T>,
): TransactionHolder {
  let tx: DeliveryTransaction | undefined;
  let ended = false;
  return {
    leaseId,
    async open() {
      const pending = inbox.begin?.(key, leaseId);
      if (pending === undefined) return undefined;
      // One that opens after the attempt ended (its begin timed out, or the listeners' time ran out) is
      // rolled back at once: no connection stays held by an attempt nobody waits for.
      pending.then(
        (late) => {
          if (ended && late !== tx) void late?.rollback();
        },
        () => {}, // the rejection is the awaited call's below
      );
      const opened = await bound(pending);
      if (ended) throw new DeliveryError(`the attempt at ${key} ended before its transaction opened`);
      tx = opened;
      return tx;
    },
    current: () => tx,
    async end(listeners) {
      ended = true;
      return tx?.rollback(listeners);
    },
  };
}

/**
 * The `landed` words of what `commit()` or `rollback()` resolved, if any: only a string there counts (a
 * store of one's own may resolve what its driver gave, such as pg's result of `ROLLBACK`).
 */
function wordsOf(resolved: unknown): string | undefined {
  const landed: unknown = Reflect.get(Object(resolved), 'landed');
  return typeof landed === 'string' ? landed : undefined;
}

/** `error`, with what to do added when it says the database ended the delivery's connection. */
function withHint(error: IpnKitError): IpnKitError {
  const hint = connectionHint(error);
  return hint === undefined ? error : new DeliveryError(`${error.message}: ${hint}`, { cause: error });
}

/** Why an entry taken up more than `maxAttempts` times ends dead without another attempt. */
function unsettled(entry: InboxEntry): string {
  const last = entry.lastError === null ? '' : ` (the last recorded: ${entry.lastError})`;
  return (
    `${entry.key} was taken up ${entry.attempts - 1} times and no attempt recorded how it ended${last}: ` +
    "each one's process died or lost its connection before it could (a crash; a restart; a role's " +
    'idle_in_transaction_session_timeout or statement_timeout shorter than the listener: raise it for the ' +
    'role above leaseMs, or keep the listener under it)'
  );
}
