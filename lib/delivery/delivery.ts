import { randomUUID } from 'node:crypto';
import type { StandardSchemaV1 } from '../notification/standard-schema.js';
import { createDeliveryContext, identify, keyOf, type Emitters } from './delivery-context.js';
import { createDurableDelivery, type Driver } from './durable-delivery.js';
import {
  IpnKitError,
  messageOf,
  StatusQueryError,
  StoreError,
  VerificationBusyError,
} from '../shared/errors.js';
import type { ResolvedOptions } from '../config/options.js';
import {
  ipnNotificationSchema,
  isFinalState,
  toRecord,
  type IpnNotification,
} from '../notification/schema.js';
import type { createStoreClaimer } from './store-claimer.js';
import type {
  AuditEntry,
  AuditListOptions,
  DeliveryStatus,
  DurableStore,
  InboxEntry,
  ListOptions,
  PurgedStatus,
  StatusCounts,
} from '../stores/store.js';
import { listActions, recordAction, type AuditAction } from './audit.js';
import { checkPurgeWindow } from './retention.js';
import { checkPurge } from '../stores/redact-record.js';
import type { StatusRecord } from '../status/status-envelope.js';
import { mismatchesOf, type RejectedEvent, type VerifiedField } from '../status/verify-notification.js';
import { lackingFields } from '../status/status-envelope.js';
import { createVerifyQueue } from './verify-queue.js';
import type { StatusSource } from '../status/verify-notification.js';
import { accounted } from './accounts.js';
import { within } from '../shared/within.js';
import type { Metrics } from '../observability/metrics.js';
import type { AlertMonitor } from '../observability/alerts.js';
import { createLogThrottle } from '../observability/log-throttle.js';
import {
  keepTraceparent,
  takeTraceparent,
  traceAttempt,
  traceStatusQuery,
  tracingActive,
  type Parent,
} from '../observability/tracing.js';
import {
  createExpectations,
  isSettled,
  recordAllowance,
  REJECTED_ATTEMPTS,
  retire,
  settlesExpectation,
  type ExpectationHold,
} from './expectations.js';
import type { Expectation } from '../stores/expectation-store.js';
import { createReconcileSweep } from './reconcile-sweep.js';
import { createUnexpectedScreen, type Screened } from './unexpected.js';
import { isKeptUnexpected, isUnverified } from './kept-unexpected.js';
import type { DrainResult } from './drain-result.js';
import {
  replayMatching,
  replayProgress,
  type ReplayFilter,
  type ReplayProgress,
  type ReplayResult,
} from './bulk-replay.js';
import { monotonicNow } from '../shared/clock.js';
import { createLifecycle } from './lifecycle.js';
import type { LifecycleVerdict } from '../stores/lifecycle-store.js';
import { isNextBuild } from '../shared/global-scope.js';

type Claimer = ReturnType<typeof createStoreClaimer>;

/** What claiming a notification came to, and the lease its delivery takes (`''` at most once). */
export interface Acceptance {
  claimed: boolean | StoreError | VerificationBusyError;
  leaseId: string;
  /** At most once: the claimed notification contradicts its transaction's accepted state (`conflict`). */
  conflict?: boolean;
  /**
   * At least once, not claimed (`claimed` false), yet this copy took the place of the kept unexpected copy
   * that held its key (see `arrivedHeld`): made due in the inbox, delivered by recovery, its expectation
   * settled. Answered 200, not as a duplicate.
   */
  taken?: boolean;
  /**
   * At most once with `verify`: not claimed (`claimed` false), and another copy of its key is being verified
   * on this instance, its fate not decided: not a plain duplicate (see the verify queue's `undecided`).
   */
  undecided?: boolean;
}

/**
 * What delivering the service's record resolves when its key is held by a kept unexpected copy and the record
 * is partial (it lacks the amount or `custom_data`): it can neither confirm nor contradict that copy.
 */
const UNDECIDED = 'undecided' as const;

/**
 * What delivering the service's record resolves when a copy of its notification was already in the inbox,
 * held (kept as unexpected, or unverified), and was made due again or replaced by the record: the
 * notification did arrive, which the sweep's log says (it said it never had).
 */
const HELD = 'held' as const;

/**
 * What `ipn.reconcile()` resolves.
 * @inline
 */
export interface ReconcileResult {
  /** The service's record, whatever its state. */
  record: StatusRecord;
  /**
   * Whether this call emitted the notification's events (false: not final yet, already handled, or
   * rejected); at least once, also `true` when it made due a kept unexpected copy the record confirms, or
   * put the record in the place of one it contradicts (a forgery kept before its transaction existed), or
   * (with `verify`) made due again an entry dead or retried unverified under its key (a retried one keeps its
   * retry's wait, its attempts from 0), verified anew against the record, and
   * `false` (its expectation left for the sweep) when a partial record (no amount or `custom_data`) can
   * neither confirm nor contradict that copy.
   */
  emitted: boolean;
  /**
   * Whether the record contradicts the transaction's expectation (`ipn.expect()`), as the sweep would find:
   * not delivered, and a `rejected` event (reason `mismatch`) says where.
   */
  rejected: boolean;
}

/**
 * The notification's inbox, for the host's admin tools (with `delivery: 'at-least-once'`).
 * @inline
 */
export interface Inbox {
  /** Entries matching the filters (status, transaction, text in `custom_data`, dates), oldest first by default. */
  list(options?: ListOptions): Promise<InboxEntry[]>;
  /**
   * How many notifications the inbox holds by status (received at or after `receivedFrom`, when given);
   * `undefined` when the store cannot count (its `countByStatus` is optional).
   */
  countByStatus(receivedFrom?: Date): Promise<StatusCounts | undefined>;
  /** One entry by key (`transaction_id:state`). */
  get(key: string): Promise<InboxEntry | undefined>;
  /**
   * Delivers one entry again, whatever its status (attempts start over); given `from`, only if its status
   * is still one of them, checked in the store's own write. `false` when there is none (or it is in another
   * status). A kept unexpected notification still under its hold lease (`received`: its write marking it
   * kept failed) counts as `failed`, as one marked kept is: `['failed']` delivers either.
   */
  replay(key: string, from?: readonly DeliveryStatus[]): Promise<boolean>;
  /** Delivers every dead entry again, paced by `replayRate`: `replayMatching({ status: 'dead' })`. Resolves how many. */
  replayDead(): Promise<number>;
  /**
   * Delivers again every entry matching `filter` (without a status, every one not yet delivered; never a
   * kept unexpected one), at most `replayRate` a second; with `dryRun`, only counts them. `ipn.replay()` is
   * this method.
   */
  replayMatching(filter?: ReplayFilter): Promise<ReplayResult>;
  /**
   * Where the entries of a bulk replay stand now: `keys` as `replayMatching()` resolved them.
   * `ipn.replayProgress()` is this method.
   */
  replayProgress(keys: readonly string[]): Promise<ReplayProgress>;
  /**
   * Stops delivery on every instance over the store (the store's `pauseSwitch`; without one, on this
   * instance): notifications are still checked, stored and answered 200, and wait in the inbox (status
   * `failed`, attempts 0, last error `delivery paused`) until `resume()`. `ipn.pause()` is this method.
   */
  pause(): Promise<void>;
  /** Delivers again, starting with what arrived while paused, oldest first. `ipn.resume()` is this method. */
  resume(): Promise<void>;
  /** Whether `pause()` holds delivery, as this instance last read the store's flag. */
  isPaused(): boolean;
  /**
   * Deletes delivered entries delivered before `before` (given `'dead'`: dead entries gone dead before it).
   * Resolves how many. A purge of delivered entries whose `before` is later than `ttlMs` ago (inside the
   * dedupe window: a resend of one would be delivered, and credited, a second time) rejects with a
   * `PurgeWindowError` and deletes nothing, unless `options.insideDedupeWindow` asks for it.
   */
  purge(before: Date, status?: PurgedStatus, options?: PurgeOptions): Promise<number>;
  /**
   * Keeps one operator action in the store's audit log (see `lib/delivery/audit.ts`): resolves `false`
   * when the store keeps none. The CLI and the operator's page call it after each replay, purge, pause and
   * resume.
   */
  recordAction(action: AuditAction): Promise<boolean>;
  /** The operator actions the store's audit log keeps, newest first; `[]` when it keeps none. */
  actions(options?: AuditListOptions): Promise<AuditEntry[]>;
}

/**
 * `ipn.inbox.purge()`'s options.
 * @inline
 */
export interface PurgeOptions {
  /**
   * Purge delivered entries delivered inside the dedupe window (`before` later than `ttlMs` ago) all the
   * same, and the at-most-once claims made before `before` that still hold their key (made under a longer
   * `ttlMs`: the SQL stores keep them otherwise): a resend of one of them is then delivered, and credited,
   * again. Only once the service can no longer resend them.
   * @default false
   */
  insideDedupeWindow?: boolean;
}

/** How a caller of `ipn.inbox.purge()` asks for a purge inside the dedupe window. */
const PURGE_ANYWAY =
  "pass { insideDedupeWindow: true }: ipn.inbox.purge(before, 'delivered', { insideDedupeWindow: true })";

/**
 * What happens to a notification once the router has accepted it: verification (with `verify`), then the
 * events; at-least-once, the inbox's bookkeeping around them (attempts, retries, dead ones, recovery).
 */
export function createDelivery<C>(
  options: ResolvedOptions<StandardSchemaV1 | undefined>,
  emitters: Emitters<C>,
  claimer: Claimer,
  metrics?: Metrics,
  alerts?: AlertMonitor,
) {
  const { store, logger, leaseMs } = options;
  // With several API keys, an expected transaction is asked about with its expectation's account's key.
  const accountedOf = (source: StatusSource) =>
    accounted(source, store.expectations, options.storeTimeoutMs, logger);
  const verify =
    options.verify &&
    watched(traced(timeLimited(accountedOf(options.verify), options.verifyTimeoutMs)), alerts);
  const context = createDeliveryContext<C>({ ...options, verify }, emitters);
  // A claim still running past its answer (503) may land while the router closes: close() waits for it.
  claimer.track(context.write);
  const durable = options.delivery === 'at-least-once' ? (store as DurableStore) : undefined;
  // The status query is for notifications that never arrived: the sweep's client, not necessarily verify's.
  const statusSource = options.statusClient
    ? watched(traced(accountedOf(options.statusClient)), alerts)
    : verify;
  const lifecycle = createLifecycle(context, statusSource);
  const expectations = createExpectations(context, store);
  // At least once, an expected copy's expectation is settled at its claim, before verification: made due
  // again when verification gives the copy up (dead unverified) or rejects it, so that the sweep asks.
  const durably =
    durable &&
    createDurableDelivery(context, durable, metrics, lifecycle, alerts, (n) => expectations.reopen(n));
  const verifying = verify && !durable ? createVerifyQueue(context, verify, lifecycle) : undefined;
  const { detach, after } = context;
  const shedWarning = createLogThrottle({ everyMs: 60_000 });
  /** Who takes up a failed attempt's retry: the router's timers, or the scheduler's `drain()` only. */
  const driver: Driver = options.backgroundWork === 'drain' ? 'drain' : 'timers';
  /** Built by `next build`, which imports route modules and serves nothing: this router never starts. */
  const building = isNextBuild();

  /** A notification turned away by the bound: logged at most once a minute, with how many were. */
  function shed(n: IpnNotification): VerificationBusyError {
    const error = new VerificationBusyError(n.transaction_id, verifying?.size() ?? 0);
    const turnedAway = shedWarning.note();
    if (turnedAway !== undefined) {
      logger.warn(
        { shed: turnedAway, maxPendingVerifications: options.maxPendingVerifications },
        `${turnedAway} notification(s) answered 503 since the last warning: maxPendingVerifications are ` +
          'being verified (a flood of forged notifications? add a secret)',
      );
    }
    return error;
  }
  // At least once, the query is the work after the 200; at most once, the answer waits for it, briefly: a
  // slower answer is cached by the client (single flight), and the service's resend is confirmed from it.
  const unexpected = createUnexpectedScreen(
    context,
    durable,
    options.statusClient &&
      traced(
        durable
          ? timeLimited(accountedOf(options.statusClient), options.verifyTimeoutMs)
          : timeLimited(accountedOf(options.statusClient), options.storeTimeoutMs, 'storeTimeoutMs'),
      ),
    () => recoverSoon(),
  );
  const sweeper =
    expectations.store &&
    createReconcileSweep(
      context,
      expectations.store,
      statusSource,
      (record, driver) => deliverRecord(record, driver),
      (record, taken) => expectations.settleHeld(record, taken),
    );
  const sweep = () => sweeper?.sweep();
  /** `close()` has begun: the timers and `drain()` take up no new work (it would run into a closed store). */
  let stopping = false;
  const startSweeping = (): void =>
    void (
      driver === 'timers' &&
      sweeper?.start(() => {
        if (!stopping) void sweep();
      })
    );

  let started = false;
  /**
   * Starts the router's timers (recovery, and the sweep when a status client is given): on first use, never
   * while the router is built (a Worker builds it at global scope, where timers are forbidden). Once. Never
   * during `next build`, which imports the route modules but serves nothing (the runtime process imports
   * them again); with `backgroundWork: 'drain'`, no timer at all: `drain()` does their work.
   */
  function start(): void {
    if (started || context.isClosed() || building) return;
    if (driver === 'timers') durably?.start();
    // Once, at the start: a store that would lose the inbox it keeps says so (RedisStore without persistence).
    if (durable?.durabilityWarning) {
      void Promise.resolve()
        .then(() => durable.durabilityWarning?.())
        .then(
          (warning) => {
            if (typeof warning === 'string') logger.warn({}, warning);
          },
          () => {}, // a check that failed tells nothing: the store's own calls report its failures
        );
    }
    if (options.statusClient !== undefined) startSweeping();
    started = true;
  }

  /** The drain running on this router, which a second call joins. */
  let draining: Promise<DrainResult> | undefined;

  /** One bounded pass of what the timers do: the inbox, the verification retries, one sweep. Never rejects. */
  async function drainOnce(budgetMs: number): Promise<DrainResult> {
    const deadline = monotonicNow() + budgetMs;
    const result: DrainResult = { delivered: 0, retried: 0, dead: 0, swept: 0, left: 0 };
    const add = (counts: Partial<DrainResult>): void => {
      for (const name of ['delivered', 'retried', 'dead', 'swept', 'left'] as const)
        result[name] += counts[name] ?? 0;
    };
    try {
      if (durably) add(await durably.drain(deadline));
      // A platform with no timers: the drain is the recovery pass, and reads the backlog for the alerts.
      if (durable && alerts && !stopping) await alerts.checkInbox(durable);
      if (verifying && !stopping) add(await verifying.drain());
      if (sweeper && !stopping && !context.isClosed()) {
        const { result: swept, finished } = await sweeper.sweepUntil(deadline);
        add({ swept: swept.reconciled + swept.rejected + swept.stale, left: finished ? 0 : 1 });
      }
    } catch (cause) {
      // A bug of ours: each part reports its own store failures and never rejects.
      const message = `ipn-kit failed to drain: ${messageOf(cause)}`;
      context.report(new IpnKitError('IPN_INTERNAL', message, { cause }));
      result.left = Math.max(result.left, 1);
    }
    return result;
  }

  function inbox(): DurableStore {
    if (durable) return durable;
    throw new IpnKitError(
      'IPN_NOT_DURABLE',
      "the inbox needs delivery: 'at-least-once' with a durable store, such as new PostgresStore({ pool })",
    );
  }
  /**
   * `pause()` and `resume()`: `change` takes effect on this instance at once (no notification slips in
   * between), then in the store's pause switch for every instance; the promise rejects `IPN_NOT_DURABLE`
   * without a durable inbox to keep what arrives meanwhile, or a `StoreError` when the switch could not be
   * written (this instance changed all the same).
   */
  function held(change: () => Promise<void>): Promise<void> {
    // The executor runs now: a throw of inbox() becomes the rejection; the change starts synchronously.
    return new Promise<void>((resolve) => {
      inbox();
      resolve(change());
    });
  }
  /** The bulk replay (shared by every store: each only makes one entry due again, in its dialect). */
  async function replayWhere(filter: ReplayFilter): Promise<ReplayResult> {
    const store = inbox();
    const result = await replayMatching(store, filter, options.replayRate, async (key, delayMs, from) => {
      // A kept unexpected notification still under its hold lease (a crash between its two writes).
      await unexpected.endHold(key);
      return store.replay(key, delayMs, from);
    });
    if (result.replayed > 0) recoverSoon();
    return result;
  }
  /** After a replay: the entries are taken up now (by one batch of a drain when the timers do not run). */
  const recoverSoon = (): void => {
    if (durably && driver === 'timers') after(0, durably.recover);
    else if (durably) void durably.drain(monotonicNow());
  };

  /**
   * A claim answered 503, that went through after all: ours to deliver, or it would be lost. Its expectation
   * is settled as at any claim (else the sweep asks about a credited payment, and credits it again once the
   * claim has expired): now, or once verified.
   */
  function deliverLate(n: IpnNotification, leaseId: string, expectation?: ExpectationHold): void {
    logger.warn(identify(n), 'IPN claim landed after storeTimeoutMs: delivered late');
    // Its request was answered 503: no answered work of a request waits for this delivery's listeners, so
    // close() does (counted as a store write), or the host's shutdown cuts them short once it resolved.
    if (durably) {
      expectation?.settle();
      void context.write(dispatch(n, leaseId));
      return;
    }
    // Verified first, and decided only once verified (the verification queue's part, as for any claim); let
    // go by close() while it is still being verified, its listeners waited for once verified.
    if (verifying) {
      void verifying.start(n, undefined, expectation, true);
      return;
    }
    // The decision is a store write nobody awaits, and its listeners those of no request: close() waits for
    // them (and for its release, if it fails).
    void detach(
      context.write(
        Promise.resolve()
          .then(() => lifecycle.decide(n))
          .then(
            (verdict) => {
              expectation?.settle(); // decided, as an admission is (a failed decision releases the key)
              return dispatch(n, leaseId, verdict === 'conflict');
            },
            (cause: unknown) => decisionFailed(n, cause),
          ),
      ),
    );
  }

  /**
   * At most once, a claimed notification whose lifecycle could not be decided: reported, and its claim
   * released, so that the service's resend (after the 503) or a reconcile is decided again. Never a guess:
   * a FAILED is never emitted undecided.
   */
  async function decisionFailed(n: IpnNotification, cause: unknown): Promise<StoreError> {
    const key = keyOf(n);
    const error =
      cause instanceof StoreError
        ? cause
        : new StoreError(`the store failed to decide the lifecycle of ${key}: ${messageOf(cause)}`, {
            cause,
          });
    await within(context.release(key), options.storeTimeoutMs, () => error).catch(() => undefined);
    return error;
  }

  /**
   * At most once, a claim that went through is decided by the transaction's lifecycle before the answer: a
   * failure answers 503 (the claim released), so that the service resends. At once when both the claim and
   * the decision answered synchronously (MemoryStore). Not for a notification still to verify (`verify`):
   * the verification queue decides it once verified, so that a forgery never touches the lifecycle.
   */
  function decided(n: IpnNotification, acceptance: Acceptance): Acceptance | Promise<Acceptance> {
    if (durable || acceptance.claimed !== true) return acceptance;
    const { leaseId } = acceptance;
    const verdictOf = (verdict: LifecycleVerdict): Acceptance => ({
      claimed: true,
      leaseId,
      conflict: verdict === 'conflict',
    });
    const failed = async (cause: unknown): Promise<Acceptance> => ({
      claimed: await decisionFailed(n, cause),
      leaseId,
    });
    let verdict: LifecycleVerdict | Promise<LifecycleVerdict>;
    try {
      verdict = lifecycle.decide(n);
    } catch (cause) {
      return failed(cause);
    }
    if (!(verdict instanceof Promise)) return verdictOf(verdict);
    return lifecycle.decideWithin(n, verdict).then(verdictOf, failed);
  }

  /** What a claim came to; a verification slot reserved for a notification not claimed is given back. */
  function acceptance(key: string, claimed: boolean | StoreError, leaseId: string): Acceptance {
    // Asked before its own reservation is given back: a release since it reserved the key counts.
    const undecided = claimed === false && verifying?.undecided(key) === true;
    if (claimed !== true) verifying?.unreserve(key);
    return undecided ? { claimed, leaseId, undecided } : { claimed, leaseId };
  }

  /**
   * Resolves when the first attempt has settled, listeners included (for a `waitUntil`); never rejects.
   * The attempt's span is a child of `parent`, the request's (when traced).
   */
  function dispatch(
    n: IpnNotification,
    leaseId: string,
    conflict = false,
    parent?: Parent,
    expectation?: ExpectationHold,
  ): Promise<void> {
    if (durably) return detach(durably.deliver(keyOf(n), n, leaseId, 1, driver, parent));
    if (conflict) return detach(lifecycle.conflict(n));
    if (verifying) return verifying.start(n, parent, expectation);
    if (!tracingActive()) return context.emitNow(n);
    // At most once, the one attempt: its listeners run in its span; their failures are `error` events.
    return traceAttempt(n, keyOf(n), 1, parent, async (span) => {
      await context.emitNow(n);
      span?.end('emitted');
    });
  }

  async function settleReconciled(
    record: IpnNotification,
    key: string,
    leaseId: string,
    by: Driver = driver,
  ): Promise<boolean> {
    if (durably) return durably.deliver(key, record, leaseId, 1, by);
    const acceptance = await decided(record, { claimed: true, leaseId });
    if (acceptance.claimed instanceof Error) throw acceptance.claimed;
    // reconcile resolves at once, as before: listeners are not awaited, but for close(): those of no request
    // (the sweep's, a late claim's), they would run into the host's shutdown, the payment never sent again
    if (acceptance.conflict === true) void context.write(detach(lifecycle.conflict(record)));
    else void context.write(context.emitNow(record));
    return true;
  }

  /**
   * Delivers a final record of the service as a notification, through the same dedupe: `true` when this
   * call emitted it, `false` when it was already handled, {@link HELD} when it made due (or replaced) a copy
   * held under its key. The service's own record needs no verification.
   */
  async function deliverRecord(
    record: IpnNotification,
    by: Driver = driver,
  ): Promise<boolean | typeof UNDECIDED | typeof HELD> {
    const key = keyOf(record);
    const lease = { id: randomUUID(), ms: leaseMs };
    const claimed = await claimer.claim(
      key,
      // Landed late, at most once its decision is a store write nobody awaits: close() waits for it.
      () =>
        void detach(
          durable
            ? settleReconciled(record, key, lease.id)
            : context.write(settleReconciled(record, key, lease.id)),
        ),
      durable && (() => durable.receive(key, toRecord(record), lease)),
    );
    if (claimed instanceof StoreError) throw claimed;
    if (!claimed) {
      if (!durable) return false;
      const made = await deliverHeld(durable, record, key);
      return made === true ? HELD : made;
    }
    return settleReconciled(record, key, lease.id, by);
  }

  /**
   * A store call on the path of the service's record (the sweep's, `ipn.reconcile()`'s) to a key already in
   * the inbox: bounded by `storeTimeoutMs`, and its every failure a `StoreError` (with the store's error as
   * `cause`), as `ipn.reconcile()` documents: a store's own plain `Error` went out of it as it was.
   */
  async function stored<T>(call: () => T | Promise<T>, what: string): Promise<T> {
    try {
      return await context.bounded(Promise.resolve().then(call), what);
    } catch (cause) {
      if (cause instanceof StoreError) throw cause;
      throw new StoreError(`the store failed to ${what}: ${messageOf(cause)}`, { cause });
    }
  }

  /**
   * The error of a store with no `replayWith()`, when a copy kept as unexpected under `key` is to give its
   * place to `what` (the service's record, or an expected copy): nothing else puts it there, and a replay of
   * the key would deliver the kept copy. `then`: what becomes of it (a 503, or the copy left kept).
   */
  const withoutReplayWith = (key: string, what: string, then: string): StoreError =>
    new StoreError(
      `an unexpected copy with another record is kept under ${key}, and the store has no replayWith() to put ${what} in its place: ${then} (give the store replayWith(), or credit the payment yourself; a replay of ${key} would deliver the kept copy)`,
    );

  /** {@link stored}, resolving its `StoreError` instead of rejecting with it (a copy's answer is then a 503). */
  const storedOr = <T>(call: () => T | Promise<T>, what: string): Promise<T | StoreError> =>
    stored(call, what).catch((error: StoreError) => error);

  /**
   * At least once, the key of a final record the sweep or `ipn.reconcile()` found already in the inbox: an
   * entry unverified (dead, or retried) is made due again ({@link redeemed}: verification confirms it against this record
   * now, or delivers the service's record in its place), `true`; else {@link deliverKept}. A partial record
   * (no amount or `custom_data`) would not let verification decide either: {@link UNDECIDED}, nothing made
   * due, so that the sweep asks again and reports the payment `stale` at its bound.
   */
  async function deliverHeld(
    held: DurableStore,
    record: IpnNotification,
    key: string,
  ): Promise<boolean | typeof UNDECIDED> {
    if (verify) {
      const entry = await stored(() => held.get(key), `read ${key}`);
      if (entry !== undefined && isUnverified(entry)) {
        if (lackingFields(record).length > 0 || record.amount === null) return UNDECIDED;
        const made = await redeemed(held, key, entry);
        if (made instanceof StoreError) throw made;
        if (made) return true;
      }
    }
    return deliverKept(held, record, key);
  }

  /**
   * At least once, a copy `n` of `key` arrived (at a claim, with `verify`, or matching its expectation) while
   * the inbox entry holds its key: with `verify`, an entry unverified is made due again ({@link redeemed});
   * with `expectation` (the copy matched it: expected copies are credited without a status query), an entry
   * that is a kept unexpected copy with another record (a forgery kept before the genuine notification came,
   * then `ipn.expect()`) is taken over by this copy ({@link replaceKept}: it takes the kept copy's place and
   * is made due, in one store write), its expectation settled: `'taken'`. An identical record is a resend of
   * the kept copy, left as it is. One read; a store that fails, or has no `replayWith()` to take a kept
   * forgery's place with, is a `StoreError` (answered 503: the service resends it, and nothing answered 200
   * is dropped).
   */
  async function arrivedHeld(
    held: DurableStore,
    n: IpnNotification,
    key: string,
    expectation: ExpectationHold | undefined,
  ): Promise<boolean | 'taken' | StoreError> {
    const entry = await storedOr(() => held.get(key), `read ${key}, held by another copy`);
    if (entry instanceof StoreError || entry === undefined) return entry ?? false;
    if (verify && isUnverified(entry)) return redeemed(held, key, entry);
    const kept = expectation && keptOther(entry, n);
    if (!kept) return false;
    try {
      if (held.replayWith === undefined)
        return withoutReplayWith(key, 'its expected copy', 'answered 503, so that the service resends it');
      const taken = await replaceKept(held, n, key, kept, mismatchesOf(kept, n), 'its expected copy');
      // Its expectation settled as at a claim: else the sweep reported a credited payment `stale`.
      if (taken) expectation.settle();
      return taken && 'taken';
    } catch (cause) {
      const message = `the store failed to put the expected copy of ${key} in the place of the unexpected copy kept there: ${messageOf(cause)}`;
      return cause instanceof StoreError ? cause : new StoreError(message, { cause });
    }
  }

  /**
   * The copy kept in `entry` when it is a kept unexpected one (under its hold lease, or marked kept) whose
   * record differs from `n`'s (its `traceparent` aside): else `undefined`, and an identical record is a
   * resend of the kept copy.
   */
  function keptOther(entry: InboxEntry, n: IpnNotification): IpnNotification | undefined {
    if (!isKeptUnexpected(entry)) return undefined;
    const kept = ipnNotificationSchema.safeParse(entry.record);
    if (!kept.success) return undefined;
    return canonical(toRecord(kept.data)) === canonical(toRecord(n)) ? undefined : kept.data;
  }

  /**
   * At least once, a copy of a transaction with no expectation (option `unexpected`), kept by the screen,
   * found its key held: a kept unexpected copy with another record (a forgery kept under a pending or next
   * id before the genuine notification came) is not dropped as a plain duplicate. It is screened as a new
   * one would be, by the one status query (`unexpected: 'verify'` with a status client; the client's guard
   * bounds a flood of copies): confirmed, the service's record takes the kept copy's place, or confirms it,
   * and is made due ({@link deliverKept}), answered 200; otherwise (unless the kept copy matches it in
   * state, amount and `custom_data`: then a duplicate, nothing of it lost) the copy is `unconfirmed` (503 and its
   * `rejected` event: the key stays the kept copy's, never credited, and the service resends this one, to
   * be confirmed later or credited once expected). A store that fails is a 503. An identical record, or an
   * entry that is not kept unexpected, is a duplicate. One read; a write only once confirmed.
   */
  async function screenHeld(held: DurableStore, n: IpnNotification): Promise<Screened> {
    const key = keyOf(n);
    const failed = (what: string) => (cause: unknown) =>
      cause instanceof StoreError
        ? cause
        : new StoreError(`the store failed to ${what} ${key}: ${messageOf(cause)}`, { cause });
    const entry = await storedOr(() => held.get(key), `read ${key}`);
    if (entry instanceof StoreError) return { kind: 'store-failed', error: entry };
    const kept = entry && keptOther(entry, n);
    if (!entry || !kept) return { kind: 'duplicate' };
    const checked = await unexpected.recheck(n);
    // Unconfirmed, a copy the kept one matches in state, amount and `custom_data` (the service's resend,
    // another informational field changed) loses nothing as a duplicate: the kept copy holds what it says.
    if (!checked.confirmed && mismatchesOf(kept, n).length === 0) return { kind: 'duplicate' };
    if (!checked.confirmed) return { kind: 'unconfirmed', event: checked.event };
    const record = checked.status;
    if (mismatchesOf(kept, record).length > 0 && held.replayWith === undefined) {
      const error = withoutReplayWith(
        key,
        "the service's record",
        'answered 503, so that the service resends it',
      );
      return { kind: 'store-failed', error };
    }
    let delivered: boolean | typeof UNDECIDED;
    try {
      delivered = await deliverKept(held, record, key, entry);
    } catch (cause) {
      return { kind: 'store-failed', error: failed('put the confirmed record in the place of kept')(cause) };
    }
    // Not kept any more (taken up meanwhile: by another instance, the sweep or a replay): a duplicate.
    if (delivered !== true) return { kind: 'duplicate' };
    return {
      kind: 'held',
      after: () =>
        Promise.resolve().then(() =>
          logger.info(
            identify(n),
            "a copy of a key held by a kept unexpected copy was confirmed by the status query: the service's record is delivered",
          ),
        ),
    };
  }

  /**
   * At least once with `verify`, a copy of `key` arrived (a resend, the service's genuine notification, the
   * sweep's record) while its inbox entry holds it: an entry unverified (verification never confirmed it: a
   * forged copy that took the key first, of a transaction still pending or not issued yet), dead or still
   * retried, is made due again, attempts from 0, so that verification runs again: it then confirms the copy held, or delivers the
   * service's record in its place (`replace`), or rejects it. Without this, the genuine payment of that key
   * was answered as a duplicate of the dead forgery, and never credited. Any other entry is left as it is (a
   * listener's failure may hold a credit). Whether it was made due, or a `StoreError` when the store failed
   * (the copy is then answered 503, so that the service resends it). One read, on this path only.
   */
  async function redeemed(
    held: DurableStore,
    key: string,
    known?: InboxEntry,
  ): Promise<boolean | StoreError> {
    try {
      const entry = known ?? (await stored(() => held.get(key), `read ${key}`));
      if (entry === undefined || !isUnverified(entry)) return false;
      // Retried meanwhile (`failed`), its wait is kept (the status client's guard may not answer sooner) and
      // its attempts start over: the copy that came is not lost to the attempts left before `dead`.
      const { status } = entry;
      const wait = status === 'failed' ? Math.max(0, entry.nextAttemptAt.getTime() - Date.now()) : 0;
      let replayed = await stored(() => held.replay(key, wait, [status]), `make due ${key}`);
      let revived = replayed && status === 'dead';
      // Retried when read, its attempt then settled it dead unverified (its last): made due all the same.
      if (!replayed && status === 'failed') {
        const now = await stored(() => held.get(key), `read ${key}`);
        if (now?.status === 'dead' && isUnverified(now)) {
          replayed = await stored(() => held.replay(key, 0, ['dead']), `make due ${key}`);
          revived = replayed;
        }
      }
      if (revived) {
        logger.info(
          { key, event: 'redeemed' },
          `a copy of ${key} arrived while its entry was dead unverified: made due again, to verify it anew`,
        );
        recoverSoon();
      }
      return replayed;
    } catch (cause) {
      const message = `the store failed to read ${key}, held by another copy: ${messageOf(cause)}`;
      return cause instanceof StoreError ? cause : new StoreError(message, { cause });
    }
  }

  /**
   * At least once, the key of a final record the sweep or `ipn.reconcile()` found already in the inbox: when
   * it is a kept unexpected notification (no expectation when it came, and its one status query refused or
   * not made) and the record confirms it (state, amount, `custom_data`), it is made due, as an operator's
   * replay of its key does: the sweep settled its expectation on the held key, and the payment stayed kept,
   * never credited and never `stale`. A copy the record contradicts (a forgery kept before its transaction
   * existed: `rejected` when it came) is replaced by the record, see {@link replaceKept}. A partial record
   * (it lacks the amount or `custom_data`) neither confirms nor contradicts it, as for the router's own
   * verification: {@link UNDECIDED}, so that its expectation is not settled on the held key.
   */
  async function deliverKept(
    held: DurableStore,
    record: IpnNotification,
    key: string,
    known?: InboxEntry,
  ): Promise<boolean | typeof UNDECIDED> {
    // Read before by the caller (a copy arriving): its writes check the status they expect all the same.
    const entry = known ?? (await stored(() => held.get(key), `read ${key}`));
    if (entry === undefined || !isKeptUnexpected(entry)) return false;
    const kept = ipnNotificationSchema.safeParse(entry.record);
    if (!kept.success) return false;
    if (lackingFields(record).length > 0 || record.amount === null) return UNDECIDED;
    const contradicted = mismatchesOf(kept.data, record);
    if (contradicted.length > 0) return replaceKept(held, record, key, kept.data, contradicted);
    await stored(() => unexpected.endHold(key), `end the hold of ${key}`);
    const replayed = await stored(() => held.replay(key, 0, ['failed']), `make due ${key}`);
    if (!replayed) return false;
    logger.info(
      identify(record),
      "kept unexpected notification confirmed by the service's record of its expected transaction: delivered",
    );
    recoverSoon();
    return true;
  }

  /**
   * At least once, a kept unexpected copy of `key` that the service's record contradicts: a forgery posted
   * before its transaction existed (transaction ids are a sequence: the next one is easy to guess), which
   * held the key when the genuine notification came (answered as its duplicate). The record, already allowed
   * by the transaction's expectation, takes the copy's place and is made due in one store write
   * (`replayWith`, only while the entry is still `failed`, and not leased), as an operator's replay does:
   * credited once, by recovery, never the forgery. Under its hold lease still, the hold ends first into a
   * kept copy, never due. Two instances at once: one write wins, the other resolves `false`. A store
   * without `replayWith` leaves the copy kept: reported (`error`), and `false`.
   */
  async function replaceKept(
    held: DurableStore,
    record: IpnNotification,
    key: string,
    kept: IpnNotification,
    contradicted: readonly VerifiedField[],
    by = "the service's record of its expected transaction",
  ): Promise<boolean> {
    const replayWith = held.replayWith?.bind(held);
    if (replayWith === undefined) {
      const then = `it contradicts the record (${contradicted.join(', ')}); it stays kept, the payment not credited`;
      context.report(withoutReplayWith(key, "the service's record", then), record);
      return false;
    }
    await stored(() => unexpected.endHold(key, false), `end the hold of ${key}`);
    const replaced = await stored(() => replayWith(key, toRecord(record), ['failed']), `replace kept ${key}`);
    if (!replaced) return false;
    const fields = Object.fromEntries(
      contradicted.map((field) => [field, { kept: kept[field], record: record[field] }]),
    );
    logger.warn(
      { ...identify(record), contradicted: fields },
      `kept unexpected notification contradicted by ${by} (a forgery kept before the payment existed): replaced by it, delivered`,
    );
    recoverSoon();
    return true;
  }

  /**
   * `ipn.reconcile()`'s expectation, settled (kept for `ttlMs`, for late copies to be checked against, never
   * asked about again). A store that fails or does not answer within `storeTimeoutMs` is an `error` event:
   * the record was decided all the same, and the sweep asks about it again.
   */
  async function settleReconciledExpectation(
    expectation: Expectation | undefined,
    record: IpnNotification,
    rejected: boolean,
  ): Promise<void> {
    const kept = store.expectations;
    if (kept === undefined || expectation === undefined || isSettled(expectation)) return;
    // Credited (or already handled): settled on what the store holds now, as a late settle is. The delivery
    // ran the listeners (at least once), time for an ipn.expect() of the transaction: written over with the
    // expectation read before, its fields were lost and its contradiction with the credit never said.
    if (!rejected) return expectations.settleHeld(record, expectation);
    const id = record.transaction_id;
    try {
      await context.bounded(
        Promise.resolve().then(() => retire(kept, expectation, options.ttlMs, REJECTED_ATTEMPTS)),
        `settle the expectation of ${id}`,
      );
    } catch (cause) {
      const message = `the store failed to settle the expectation of ${id}: ${messageOf(cause)}`;
      context.report(new StoreError(message, { cause }), record);
    }
  }

  /** `ipn.reconcile()`, once a status source is known to be there. */
  async function reconcileRecord(source: StatusSource, transactionId: string): Promise<ReconcileResult> {
    const record = await source.getStatus(transactionId);
    if (!isFinalState(record.state)) return { record, emitted: false, rejected: false };
    // The service's record, like the sweep's, is credited only where the expectation allows it.
    const allowance = await recordAllowance(context, record, "the service's record not delivered", false);
    if (allowance instanceof StoreError) throw allowance;
    const { allowed, expectation, rejection } = allowance;
    const delivered = allowed && (await deliverRecord(record));
    // A partial record of a kept copy's transaction decides nothing: its expectation stays, asked again.
    if (delivered === UNDECIDED) return { record, emitted: false, rejected: false };
    const emitted = delivered !== false;
    // And its expectation settled as the sweep settles it (a record rejected, or SUCCESSFUL; a FAILED keeps
    // it): else the sweep asked again, rejected the record a second time, or reported the payment `stale`.
    if (!allowed || settlesExpectation(record.state))
      await settleReconciledExpectation(expectation, record, !allowed);
    // Said once written, as the sweep does: a listener that corrects the expectation (ipn.expect() again)
    // was written over by the rejected one, never asked about again.
    if (rejection !== undefined) context.reject(rejection);
    return { record, emitted, rejected: !allowed };
  }

  return {
    /**
     * Claims (or, at-least-once, stores) a notification before the answer: `true` first, `false` a resend.
     * `leaseId` goes to `dispatch`, after the answer. At once when the store answers synchronously
     * (MemoryStore), else a promise; never rejects. At most once, the lifecycle decides it before the
     * answer, unless it is still to verify (then once verified), or `decide` is false (a claim only checked
     * for a resend, undone at once: an unexpected notification refused). `traceparent`, the request's span
     * (when traced), is kept with the inbox entry. `expectation` is the caller's to settle once claimed, but
     * for a claim that lands after storeTimeoutMs (answered 503): settled here then (see `deliverLate`).
     */
    accept(
      n: IpnNotification,
      decide = true,
      traceparent?: string,
      expectation?: ExpectationHold,
    ): Acceptance | Promise<Acceptance> {
      const key = keyOf(n);
      // Past the bound, shed before claiming: nothing to release, and the service's resend is processed.
      if (verifying && !verifying.reserve(key)) return { claimed: shed(n), leaseId: '' };
      // Only a durable store leases: the at-most-once path makes no lease id.
      const leaseId = durable ? randomUUID() : '';
      const receive =
        durable &&
        (() => durable.receive(key, keepTraceparent(toRecord(n), traceparent), { id: leaseId, ms: leaseMs }));
      // A claim only checked for a resend (`decide` false: refused, answered 503) that lands late is undone
      // as it would have been in time: delivered late, it would be credited unconfirmed.
      const late = decide ? () => deliverLate(n, leaseId, expectation) : () => void context.release(key);
      const claimed = claimer.claimNow(key, late, receive);
      const settled = (answer: boolean | StoreError): Acceptance | Promise<Acceptance> => {
        // At least once with verify, a copy of a key whose entry is unverified (dead, or retried) makes it
        // due again; an expected copy (it matched its expectation) of a key a kept unexpected copy holds
        // takes its place. One read, on the duplicate path only, and only then.
        if (answer === false && durable && (verify || expectation !== undefined))
          // Made due again, answered as a duplicate all the same (200): the entry, durable and due, is
          // decided by the service's record, whatever this copy says; a store that failed to tell is a 503.
          return arrivedHeld(durable, n, key, expectation).then((made) => ({
            ...acceptance(key, made instanceof StoreError ? made : false, leaseId),
            ...(made === 'taken' ? { taken: true } : {}),
          }));
        const accepted = acceptance(key, answer, leaseId);
        return decide && !verifying ? decided(n, accepted) : accepted;
      };
      return claimed instanceof Promise ? claimed.then(settled) : settled(claimed);
    },

    /** Runs after the answer: verification, then the events. */
    dispatch,
    /**
     * Whether a claimed notification is verified after the answer and kept only in memory meanwhile (at most
     * once, `verify`): its expectation is then settled once verified (`dispatch`'s `expectation`).
     */
    verifiesAfterClaim: verifying !== undefined,

    /**
     * Undoes a claim the router will not deliver (it closed meanwhile), so that the service's resend is
     * processed. A durable store keeps what it stored: the next start delivers it. Never rejects.
     */
    async unclaim(n: IpnNotification): Promise<void> {
      verifying?.unreserve(keyOf(n));
      if (!durable) await context.release(keyOf(n));
    },

    async reconcile(transactionId: string): Promise<ReconcileResult> {
      // Once close() began, as a POST is answered 503: nothing asked, claimed nor written. Let through, its
      // claim and listeners ran into the store the host closes (a key held for ttlMs with nothing delivered,
      // a credit cut short): the payment is the next process's to reconcile, or its sweep's.
      if (stopping) {
        throw new IpnKitError(
          'IPN_CLOSED',
          `ipn.reconcile(): the router is closed (ipn.close() was called), nothing was asked nor claimed for ` +
            `${String(transactionId)}: reconcile it from the instance that replaces this one`,
        );
      }
      if (statusSource === undefined) {
        throw new IpnKitError(
          'IPN_NO_STATUS_CLIENT',
          'reconcile needs a status client: ipnRouter({ statusClient: createStatusClient({ baseUrl, apiKey }) })',
        );
      }
      // Counted until it settles, as the sweep's pass is: close() waits for it (at most its timeoutMs). A
      // claim landing as the router closes, decided once the host's pool ended, held the key for ttlMs with
      // nothing delivered: the next process's sweep found it held and settled the expectation, unpaid.
      return context.write(reconcileRecord(statusSource, transactionId));
    },

    /** `ipn.expect()`: keeps the expectation, and starts this instance's sweep. */
    async expect(...args: Parameters<typeof expectations.expect>): Promise<void> {
      await expectations.expect(...args);
      startSweeping();
    },

    /** The expectation check of an incoming notification, and its settling. */
    expectations,
    /** The option `unexpected`, for a notification with no expectation once they are in use. Never rejects. */
    screenUnexpected: async (n: IpnNotification): Promise<Screened> => {
      const screened = await unexpected.screen(n);
      // At least once, its key held: by a kept unexpected copy with another record, it is screened anew.
      return screened.kind === 'duplicate' && durable ? screenHeld(durable, n) : screened;
    },
    /** Emits `rejected` for a notification its expectation contradicts (made without any status query). */
    rejectExpected: (event: RejectedEvent) => context.reject(event),
    start,
    /** `ipn.drain()`: joins the pass running on this router, or starts one. Never rejects. */
    drain(budgetMs: number): Promise<DrainResult> {
      draining ??= drainOnce(budgetMs).finally(() => {
        draining = undefined;
      });
      return draining;
    },
    /** `ipn.sweep()`: one reconciliation pass now. */
    sweep: async () => (await sweep()) ?? { queried: 0, reconciled: 0, rejected: 0, stale: 0, swept: false },

    inbox: {
      list: async (listOptions) => inbox().list(listOptions),
      get: async (key) => inbox().get(key),
      countByStatus: async (receivedFrom) => {
        const store = inbox();
        return store.countByStatus ? store.countByStatus(receivedFrom) : undefined;
      },
      replay: async (key, from) => {
        const store = inbox();
        // A kept unexpected notification still under its hold lease (a crash between its two writes) is
        // `received`: its hold is ended only for a replay `from` allows there (ending it makes it due, `failed`,
        // whatever the replay then does: a replay `from` refused would deliver it all the same, unconfirmed).
        // Such a copy is kept as one marked `failed` is: `from` with `failed` (the advice its `rejected` event
        // and `lastError` give, `['failed']`) ends it too, else that advice did nothing and it stayed kept.
        const ended =
          (from === undefined || from.includes('received') || from.includes('failed')) &&
          (await unexpected.endHold(key));
        const allowed = ended && from !== undefined ? [...from, 'failed' as const] : from;
        const found = await store.replay(key, 0, allowed);
        if (found) recoverSoon();
        return found;
      },
      replayDead: async () => (await replayWhere({ status: 'dead' })).replayed,
      replayMatching: async (filter = {}) => replayWhere(filter),
      replayProgress: async (keys) => replayProgress(inbox(), keys),
      pause: () => held(async () => durably?.pause()),
      resume: () =>
        held(async () => {
          try {
            await durably?.resume();
          } finally {
            recoverSoon(); // this instance resumed, whether or not the switch was written
          }
        }),
      isPaused: () => durably?.isPaused() ?? false,
      purge: async (before, status, purgeOptions) => {
        const store = inbox();
        const asked = purgeOptions?.insideDedupeWindow === true;
        // Checked here, not left to the store: a store that does not check (MemoryStore, one of yours) took a
        // number or a string for `before`, which the window's rule lets through, and deleted today's entries.
        checkPurge('ipn.inbox', before, status ?? 'delivered');
        checkPurgeWindow(before, status, options.ttlMs, asked, PURGE_ANYWAY);
        // Not asked for, the store keeps the claims still holding their key (made under a longer ttlMs).
        return asked
          ? store.purge(before, status, { insideDedupeWindow: true })
          : store.purge(before, status);
      },
      recordAction: async (action) => recordAction(inbox(), action),
      actions: async (options) => listActions(inbox(), options),
    } satisfies Inbox,

    /**
     * `close()`'s first step: the timers and `drain()` take up no new work from now on. Resolves once the
     * inbox batch, the drain and the sweep running now settled; never rejects.
     */
    stop(): Promise<void> {
      stopping = true;
      return Promise.all([durably?.stop(), draining, sweeper?.stop()]).then(
        () => undefined,
        () => undefined,
      );
    },

    /**
     * `close()`'s last step before the store closes: the notifications still being verified are let go
     * (their keys released, their expectations due again), the timers stopped. Those writes, and every other
     * one started and awaited nowhere, are in {@link writes}, for `close()` to wait for.
     */
    close(): void {
      verifying?.close();
      // A claim whose answer was lost and still to be asked about again: asked now, and let go if it was
      // ours (answered 503, the service resends it), else the key stayed claimed with nothing delivered.
      claimer.close({
        release: (key) => context.release(key),
        unanswered: (key, cause) => {
          const message =
            `the store did not answer about the claim of ${key} (its answer lost, answered 503) as the router ` +
            `closed: if it was written, the key stays claimed until ttlMs and the resend is answered as a ` +
            `duplicate (reconcile that payment): ${messageOf(cause)}`;
          context.report(new StoreError(message, { cause }));
        },
      });
      context.close();
    },
    /** The store writes started and awaited nowhere (releases, expectations, late decisions). */
    writes: context.writes,
  };
}

/** The accounts a wrapped source still says it holds keys for (`ipn.expect()` checks its `account` against them). */
const accountsOf = ({ accounts }: StatusSource) => (accounts === undefined ? {} : { accounts });

/**
 * `source`, whose every query's outcome the alerts are told of (a refusal or block fires `status_refused`,
 * an answer resolves it). Only the status query's outcome: a call per query, none per notification.
 */
function watched(source: StatusSource, alerts: AlertMonitor | undefined): StatusSource {
  if (alerts === undefined) return source;
  return {
    ...accountsOf(source),
    getStatus: (id, options) => {
      const asked = options === undefined ? source.getStatus(id) : source.getStatus(id, options);
      if (!alerts.active()) return asked; // no listener: not even a promise more per query
      return Promise.resolve(asked).then(
        (record) => {
          alerts.status();
          return record;
        },
        (error: unknown) => {
          alerts.status(error);
          throw error;
        },
      );
    },
  };
}

/** `source`, whose every query is a span of its own when traces are on (see `traceStatusQuery`). */
function traced(source: StatusSource): StatusSource {
  return {
    ...accountsOf(source),
    getStatus: (id, options) =>
      traceStatusQuery(id, () =>
        options === undefined ? source.getStatus(id) : source.getStatus(id, options),
      ),
  };
}

/**
 * `source`, whose every query fails as a retryable `StatusQueryError` after `ms` without an answer. The
 * query's options (`since`) are passed on: without them a cached answer older than the notification (a
 * not-found, a FAILED) would be taken for a fresh one, and condemn it.
 */
function timeLimited(source: StatusSource, ms: number, option = 'verifyTimeoutMs'): StatusSource {
  return {
    ...accountsOf(source),
    getStatus: (id, options) =>
      within(
        Promise.resolve().then(() =>
          options === undefined ? source.getStatus(id) : source.getStatus(id, options),
        ),
        ms,
        () => {
          const message = `the status source did not answer about ${id} within ${ms} ms (${option})`;
          return new StatusQueryError(id, message, { retryable: true });
        },
      ),
  };
}

/** `record` as JSON with its keys sorted (the kept `traceparent` aside): two copies compared as records. */
function canonical(record: Record<string, unknown>): string {
  const { record: plain } = takeTraceparent(record);
  return JSON.stringify(plain, (_key, value: unknown) =>
    value !== null && typeof value === 'object' && !Array.isArray(value)
      ? Object.fromEntries(Object.entries(value).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : value,
  );
}
