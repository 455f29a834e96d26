import type { StandardOutput, StandardSchemaV1 } from '../notification/standard-schema.js';
import { IpnKitError, messageOf } from '../shared/errors.js';
import { guardLogger, ownedErrors } from '../observability/logger.js';
import { loggableError } from '../observability/redact.js';
import type { IpnEmitter } from '../delivery/safe-emitter.js';
import { createSafeEmitter, SETTLED } from '../delivery/safe-emitter.js';
import type { Inbox, ReconcileResult } from '../delivery/delivery.js';
import type { ExpectOptions } from '../delivery/expectations.js';
import type { SweepResult } from '../delivery/reconcile-sweep.js';
import { DEFAULT_DRAIN_BUDGET_MS, type DrainOptions, type DrainResult } from '../delivery/drain-result.js';
import { createMetrics, type IpnMetrics } from '../observability/metrics.js';
import { createAlertMonitor, type AlertMonitor } from '../observability/alerts.js';
import type { Protection } from '../observability/unprotected-warning.js';
import { createIpnPipeline } from './ipn-pipeline.js';
import { createAnsweredWork } from './answered-work.js';
import { ownStore } from './store-owners.js';
import type { IpnOutcome, IpnRequest } from './ipn-outcome.js';
import { resolveOptions, type Options, type ResolvedOptions } from '../config/options.js';

/** The type of `customData` for a given `customData` schema (`undefined` when there is none). */
export type CustomDataOf<S> = S extends StandardSchemaV1 ? StandardOutput<S> : undefined;

/**
 * What every transport adapter (node:http and Express, fetch, Fastify) is a thin layer over, through
 * `serve`: adapters never call these one by one.
 */
export interface IpnCore<C> {
  /** The options with every default applied, and the logger guarded. */
  readonly options: ResolvedOptions<StandardSchemaV1 | undefined>;
  /** The typed emitter methods (`on`, `once`, `off`, ...) that the public router carries. */
  readonly methods: IpnEmitter<C>;
  /** One request in, one answer out. Never rejects: a bug of ours becomes a 500, so the service resends. */
  readonly handle: (request: IpnRequest) => Promise<IpnOutcome>;
  /** The 500 answer (and its `error` event) for a bug of ours an adapter caught, e.g. reading the request. */
  readonly failure: (cause: unknown) => IpnOutcome;
  /** Reports a failure of the transport (writing the answer, an outcome's `after` that threw) as `error`. */
  readonly onFailure: (cause: unknown) => void;
  /**
   * Runs an outcome's `after` work and resolves once what it started has settled: verification, the
   * listeners and the promises they return, the store's bookkeeping (retries scheduled for later excepted).
   * Never rejects. What `serve` hands to the platform's `waitUntil`.
   */
  readonly runAfterResponse: (outcome: IpnOutcome) => Promise<void>;
  readonly reconcile: (transactionId: string) => Promise<ReconcileResult>;
  readonly expect: (transactionId: string, expectation?: ExpectOptions) => Promise<void>;
  readonly sweep: () => Promise<SweepResult>;
  readonly drain: (options?: DrainOptions) => Promise<DrainResult>;
  readonly inbox: Inbox;
  /** How the router stands against forged notifications now (the operator's page shows it). */
  readonly protection: () => Protection;
  readonly metrics: () => IpnMetrics;
  readonly close: (options?: CloseOptions) => Promise<void>;
  /** The `alert` event's monitor (`registerIpnMetrics` asks it to read the backlog's age). */
  readonly alerts: AlertMonitor;
}

/**
 * The options of `ipn.close()`.
 * @inline
 */
export interface CloseOptions {
  /**
   * How long to wait, in milliseconds, for the listeners of notifications already answered (and, at least
   * once, their bookkeeping, and the inbox batch a drain or recovery was running, and the sweep's pass)
   * before stopping the timers and closing the store; then, as long again at most, for the store writes the
   * router started itself (a key released, an expectation written), an `ipn.reconcile()` under way, and the
   * listeners of the notifications it delivered in the background (a verification retry, the sweep, a claim
   * that landed after `storeTimeoutMs`). Those still running then are reported as
   * an `error` event.
   * @default 10_000
   */
  timeoutMs?: number;
}

/** How long `close()` waits for the work after the answers already given, unless told otherwise. */
const CLOSE_TIMEOUT_MS = 10_000;

/**
 * Builds the transport-free core: options, emitter, metrics and pipeline. `self` is the public object the
 * events are emitted on (listeners' `this`).
 */
export function createIpnCore<S extends StandardSchemaV1 | undefined>(
  options: Partial<Options<S>> | undefined,
  self: () => unknown,
): IpnCore<CustomDataOf<S>> {
  type C = CustomDataOf<S>;
  const checked = resolveOptions(options);
  // Bound once the emitter exists: an app with an `error` listener owns its errors (logged at debug).
  let owned = (): boolean => false;
  const resolved = { ...checked, logger: ownedErrors(guardLogger(checked.logger), () => owned()) };
  const verifier = resolved.verify as { stats?: unknown } | undefined;
  // The alerts are told through the router's own `alert` event; with no listener, every hook is a no-op.
  const alerts: AlertMonitor = createAlertMonitor({
    thresholds: resolved.alerts,
    emit: (event) => void emit('alert', event),
    listening: () => methods.listenerCount('alert') > 0,
    logger: resolved.logger,
    storeTimeoutMs: resolved.storeTimeoutMs,
  });
  const metrics = createMetrics(() => verifier?.stats, alerts.backlogAgeMs);
  // Every event is counted on its way out: the counters need no listener of their own, nor do the alerts.
  const observe = (event: string, payload: unknown, awaited: boolean): void => {
    metrics.count(event, payload, awaited);
    alerts.observe(event, payload);
  };
  const { methods, emit, emitAndWait, track, listens } = createSafeEmitter<C>(
    resolved.logger,
    self,
    observe,
    !resolved.logCustomerData,
  );
  owned = () => listens('error');
  const pipeline = createIpnPipeline<C>(resolved, { emit, emitAndWait, track }, metrics, alerts);
  // A second open router on this store (hot reload, most often) is told once.
  const disown = ownStore(resolved.store, resolved.logger);

  // A bug of ours, not bad input: log it and report it as an `error` event.
  const internal = (cause: unknown): IpnKitError => {
    const message = `ipn-kit failed to handle a request: ${messageOf(cause)}`;
    const error = new IpnKitError('IPN_INTERNAL', message, { cause });
    // No notification to scrub here, but the same shape as every other log line: no driver's own fields.
    const err = resolved.logCustomerData ? error : loggableError(error, undefined);
    resolved.logger.error({ err }, error.message);
    return error;
  };

  const failure = (cause: unknown): IpnOutcome => {
    const error = internal(cause);
    // Answer 500, so the service resends.
    const body = {
      error: 'internal_error',
      message: 'the notification was not processed: resend it later',
    };
    return { status: 500, body, after: () => emit('error', { error }) };
  };
  const answered = createAnsweredWork();
  const handle = async (request: IpnRequest): Promise<IpnOutcome> => {
    let outcome: IpnOutcome;
    try {
      outcome = await pipeline.handle(request);
    } catch (cause) {
      outcome = failure(cause);
    }
    answered.started(outcome);
    return outcome;
  };
  const onFailure = (cause: unknown): void => {
    emit('error', { error: internal(cause) });
  };
  const runAfterResponse = (outcome: IpnOutcome): Promise<void> => {
    let started: unknown;
    const listeners = track(() => {
      try {
        started = outcome.after?.();
      } catch (cause) {
        onFailure(cause);
      }
    });
    // Nearly every request: the listeners returned nothing to wait for, and neither did the work.
    if (listeners === SETTLED && (started === SETTLED || !isThenable(started))) {
      answered.finished(outcome);
      return SETTLED;
    }
    return Promise.all([listeners, started]).then(
      () => answered.finished(outcome),
      (error: unknown) => {
        answered.finished(outcome);
        throw error;
      },
    );
  };
  /**
   * Answers 503 from now on; once the claims in flight settled, waits for the work after the answers already
   * given (at most `timeoutMs`), then stops the timers and closes the store.
   */
  let closing: Promise<void> | undefined;
  /**
   * A second call resolves with the first: the store is closed once. A call refused for its `timeoutMs` (a
   * `TypeError`) closes nothing and is not remembered, so that a corrected call still closes the router.
   */
  const close = (options?: CloseOptions): Promise<void> => {
    if (closing !== undefined) return closing;
    const ms = options?.timeoutMs ?? CLOSE_TIMEOUT_MS;
    if (typeof ms !== 'number' || !(ms >= 0 && ms <= 2_147_483_647)) {
      return Promise.reject(
        new TypeError(
          `ipn.close: timeoutMs must be a number of milliseconds from 0 to 2147483647, not ${String(ms)}`,
        ),
      );
    }
    return (closing = closeOnce(ms));
  };
  const closeOnce = async (ms: number): Promise<void> => {
    alerts.close();
    disown();
    await pipeline.close(
      async (background) => {
        const still = await answered.settled(ms, background);
        if (still.running > 0) {
          const error = new IpnKitError(
            'IPN_INTERNAL',
            `ipn.close(): the listeners of ${still.running} notification(s) already answered were still running after ` +
              `${ms} ms (timeoutMs); the store is closed now, so what they do next may fail: give close() a longer ` +
              'timeoutMs, or make the listeners settle sooner',
          );
          resolved.logger.error({ running: still.running }, error.message);
          emit('error', { error });
        }
        if (still.background) {
          const error = new IpnKitError(
            'IPN_INTERNAL',
            `ipn.close(): the inbox batch a drain() or the recovery timer took up was still running after ${ms} ms ` +
              "(timeoutMs), or the sweep's pass was; the store is closed now: its entries are taken up again once " +
              'their lease runs out, and a key the sweep claimed and did not deliver stays claimed until ttlMs ' +
              '(reconcile that payment)',
          );
          resolved.logger.error({}, error.message);
          emit('error', { error });
        }
      },
      async (writes) => {
        // The store writes the router started itself (the keys of notifications still being verified released,
        // their expectations made due again, a late settle): waited for as the listeners are, before the store
        // closes; a pool the host ends once close() resolved would lose them.
        const left = await writes.settled(ms);
        if (left > 0) {
          const error = new IpnKitError(
            'IPN_INTERNAL',
            `ipn.close(): ${left} store write(s) the router started itself (a key released, an expectation ` +
              `settled or made due again, a claim answered late, the listeners of a notification delivered by a ` +
              `verification retry or the sweep, an ipn.reconcile() under way) were still running after ${ms} ms (timeoutMs); ` +
              'the store is closed now: a key not released stays claimed until ttlMs (a resend meanwhile is ' +
              'answered as a duplicate: reconcile those payments), an expectation not made due waits for its due time',
          );
          resolved.logger.error({ writes: left }, error.message);
          emit('error', { error });
        }
      },
    );
  };
  const { reconcile, expect, sweep, inbox, protection } = pipeline;
  const drain = (drainOptions: DrainOptions = {}): Promise<DrainResult> => {
    const budgetMs = drainOptions.budgetMs ?? DEFAULT_DRAIN_BUDGET_MS;
    if (typeof budgetMs !== 'number' || !(budgetMs >= 0)) {
      // A programmer error, thrown at once: not a rejection a cron handler would only log.
      throw new TypeError(`drain: budgetMs must be a number of milliseconds >= 0, got ${String(budgetMs)}`);
    }
    return pipeline.drain(budgetMs);
  };
  return {
    options: resolved,
    methods,
    handle,
    failure,
    onFailure,
    runAfterResponse,
    reconcile,
    expect,
    sweep,
    drain,
    inbox,
    protection,
    metrics: metrics.snapshot,
    close,
    alerts,
  };
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | null)?.then === 'function';
}
