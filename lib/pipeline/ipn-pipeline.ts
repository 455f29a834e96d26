import type { StandardSchemaV1 } from '../notification/standard-schema.js';
import { toFieldIssues } from '../notification/custom-data.js';
import { createDelivery, type Acceptance } from '../delivery/delivery.js';
import { NO_EXPECTATION, type ExpectationHold } from '../delivery/expectations.js';
import { identify, keyOf, type Emitters } from '../delivery/delivery-context.js';
import type { Metrics } from '../observability/metrics.js';
import type { AlertMonitor } from '../observability/alerts.js';
import { loggableError } from '../observability/redact.js';
import { isQuiet } from '../observability/logger.js';
import { createUnmatchedTokenWarning } from '../observability/unmatched-token-warning.js';
import { createUnprotectedWarning } from '../observability/unprotected-warning.js';
import { startRequestSpan, withoutSentTraceparent, type RequestSpan } from '../observability/tracing.js';
import { BodyUnavailableError, messageOf, StoreError, VerificationBusyError } from '../shared/errors.js';
import type { InvalidEvent } from '../delivery/events.js';
import type { RejectedEvent } from '../status/verify-notification.js';
import { matchesSecret } from '../authenticate/ipn-url.js';
import type { ResolvedOptions } from '../config/options.js';
import { isFinalState, parseNotification, type IpnNotification } from '../notification/schema.js';
import { createStoreClaimer } from '../delivery/store-claimer.js';
import type { PendingWrites } from '../delivery/pending-writes.js';
import { within } from '../shared/within.js';
import { isCloudflareWorkers } from '../shared/global-scope.js';
import {
  ALLOW,
  DUPLICATE_BODY,
  OK_BODY,
  unavailable,
  type IpnOutcome,
  type IpnRequest,
} from './ipn-outcome.js';
import { authenticateInput, readRecord } from './read-record.js';
import { createAuthentication } from '../authenticate/authentication.js';

/** What a request's answer says, for its span: the error's reason, `duplicate` or `accepted`. */
function outcomeOf(outcome: IpnOutcome): string {
  const reason = outcome.body?.error;
  if (typeof reason === 'string') return reason;
  return outcome.body === DUPLICATE_BODY ? 'duplicate' : 'accepted';
}

/**
 * What admitting a validated notification came to: claimed (ours to deliver, with the lease for `dispatch`),
 * a resend, or one of the reasons it is answered 503 and nothing stays claimed.
 */
export type Admission =
  | {
      kind: 'claimed';
      leaseId: string;
      conflict?: boolean;
      /** Its expectation, settled once verification confirms it, due again if it gives up (at most once, `verify`). */
      expectation?: ExpectationHold;
    }
  | { kind: 'duplicate' }
  /** At least once: not claimed, yet it took the place of the kept unexpected copy holding its key (due). */
  | { kind: 'taken' }
  /** At most once with `verify`: another copy of its key is being verified here, its fate not decided. */
  | { kind: 'undecided' }
  | { kind: 'store-failed'; error: StoreError }
  | { kind: 'busy'; error: VerificationBusyError }
  | { kind: 'closed' };

/**
 * The core of the router, over plain values: read the body, parse, validate, dedupe, then answer and emit.
 * Bad input is an outcome (a status and an `invalid` event), never an exception.
 */
export function createIpnPipeline<C>(
  options: ResolvedOptions<StandardSchemaV1 | undefined>,
  emitters: Emitters<C>,
  metrics?: Metrics,
  alerts?: AlertMonitor,
) {
  const { store, ttlMs, limit, logger, storeTimeoutMs } = options;
  const { emit } = emitters;
  const secrets = options.secret === undefined ? undefined : [options.secret].flat();
  const tokenWarning = createUnmatchedTokenWarning(logger);
  store.useLogger?.(logger);
  const delivery = createDelivery<C>(
    options,
    emitters,
    createStoreClaimer(store, ttlMs, storeTimeoutMs),
    metrics,
    alerts,
  );
  const unprotected = createUnprotectedWarning(
    { ...options, expectationsInUse: () => delivery.expectations.protecting() },
    logger,
  );

  /**
   * After `close()`: 503, so that the service resends to the instance that replaces this one, and nothing
   * claimed (a claim now would hold the key with nobody left to deliver it).
   */
  let closed = false;
  /** The claims in flight, which `close()` waits for. */
  const inflight = new Set<Promise<unknown>>();
  const track = <T>(pending: Promise<T>): Promise<T> => {
    inflight.add(pending);
    const done = (): void => void inflight.delete(pending);
    pending.then(done, done);
    return pending;
  };

  const reject = (event: InvalidEvent): IpnOutcome => ({
    status: event.status,
    body: { error: event.reason, message: event.message, ...(event.issues ? { issues: event.issues } : {}) },
    after: () => {
      // Not the message: a JSON syntax error quotes the body, which holds the customer's number and name.
      const fields = event.issues?.map((issue) => issue.path);
      logger.warn(
        { reason: event.reason, status: event.status, fields },
        `rejected an IPN request: ${event.reason}`,
      );
      emit('invalid', event);
    },
  });

  const authentication = options.authenticate && createAuthentication(options.authenticate, logger);

  /** A body something else read before the router: a bug of the host app's, answered 500 so the service resends. */
  const bodyUnavailable = (): IpnOutcome => {
    const error = new BodyUnavailableError();
    logger.error({ err: error }, error.message);
    return {
      status: 500,
      body: { error: 'body_unavailable', message: error.message },
      after: () => emit('error', { error }),
    };
  };

  /**
   * Claims, unless the router closed meanwhile: then the claim is undone (the inbox keeps a stored one). At
   * once when the store answers synchronously (MemoryStore), else a promise. `expectation` goes with a claim
   * that lands after storeTimeoutMs (answered 503, delivered late): settled as at any claim.
   */
  function admit(
    n: IpnNotification,
    decide = true,
    traceparent?: string,
    expectation?: ExpectationHold,
  ): Admission | Promise<Admission> {
    const accepted = delivery.accept(n, decide, traceparent, expectation);
    return accepted instanceof Promise ? accepted.then((done) => admitted(n, done)) : admitted(n, accepted);
  }

  function admitted(
    n: IpnNotification,
    { claimed, leaseId, conflict, taken, undecided }: Acceptance,
  ): Admission | Promise<Admission> {
    if (claimed instanceof StoreError) return { kind: 'store-failed', error: claimed };
    if (claimed instanceof VerificationBusyError) return { kind: 'busy', error: claimed };
    if (!claimed) {
      if (taken === true) return { kind: 'taken' };
      return undecided === true ? { kind: 'undecided' } : { kind: 'duplicate' };
    }
    if (!closed) return { kind: 'claimed', leaseId, conflict };
    return unclaim(n);
  }

  /** A claim made as the router closed, undone. */
  async function unclaim(n: IpnNotification): Promise<Admission> {
    const message = `the store did not release ${keyOf(n)} within ${storeTimeoutMs} ms (storeTimeoutMs) on close`;
    await within(delivery.unclaim(n), storeTimeoutMs, () => new StoreError(message)).catch(
      (error: StoreError) => {
        logger.error({ err: loggableError(error, n), ...identify(n) }, error.message);
        emit('error', { error, notification: n });
      },
    );
    return { kind: 'closed' };
  }

  /**
   * An unexpected notification not kept (at most once): a resend of one already handled (its expectation
   * gone since) is a duplicate, answered 200; any other is answered 503, its claim undone, so that the
   * service resends it until it is expected or the service confirms it.
   */
  async function refuse(n: IpnNotification, event: RejectedEvent): Promise<IpnOutcome> {
    // Claimed only to tell a resend, then undone: never decided by the lifecycle (it is not credited).
    const admitting = admit(n, false);
    const admission = admitting instanceof Promise ? await track(admitting) : admitting;
    if (admission.kind !== 'claimed') return answer(admission, n);
    // Bounded as the claim was: a store that does not answer the release must not hang the request. The
    // release goes on (close() waits for it); until it lands, a resend is answered as a duplicate: said.
    const message = `the store did not release ${keyOf(n)} within ${storeTimeoutMs} ms (storeTimeoutMs), refused as unexpected: until it does, a resend of it is answered as a duplicate`;
    const late = await within(delivery.unclaim(n), storeTimeoutMs, () => new StoreError(message)).then(
      () => undefined,
      (error: StoreError) => error,
    );
    return unavailable('unexpected', () => {
      delivery.rejectExpected(event);
      if (late === undefined) return;
      logger.error({ err: loggableError(late, n), ...identify(n) }, late.message);
      emit('error', { error: late, notification: n });
    });
  }

  /** The answer to an admitted notification, and the work after it (its first attempt a child of `span`). */
  function answer(admission: Admission, notification: IpnNotification, span?: RequestSpan): IpnOutcome {
    switch (admission.kind) {
      case 'closed':
        return unavailable('closed');
      case 'store-failed': {
        const { error } = admission;
        // The driver's error may quote the record (PostgreSQL's "Failing row contains (...)"): redacted.
        const err = options.logCustomerData ? error : loggableError(error, notification);
        logger.error(
          { err, transaction_id: notification.transaction_id, state: notification.state },
          options.logCustomerData ? error.message : (err.message as string),
        );
        return unavailable('store_unavailable', () => emit('error', { error, notification }));
      }
      case 'busy':
        return unavailable('verification_busy', () =>
          emit('error', { error: admission.error, notification }),
        );
      case 'undecided':
        // Not a duplicate of anything credited yet: were the other copy given up (not final, unreachable),
        // a 200 here would lose the payment. 503: the service resends it once that copy is decided (credited:
        // the resend is a duplicate; given up: the resend is claimed and verified itself).
        return unavailable('verification_pending', () => {
          if (!isQuiet(logger.debug)) {
            logger.debug(
              { transaction_id: notification.transaction_id, state: notification.state },
              'IPN copy answered 503: another copy of it is being verified',
            );
          }
        });
      case 'duplicate':
        return {
          status: 200,
          body: DUPLICATE_BODY,
          after: () => {
            if (!isQuiet(logger.debug)) {
              logger.debug(
                { transaction_id: notification.transaction_id, state: notification.state },
                'IPN resend dropped',
              );
            }
            emit('duplicate', notification);
          },
        };
      case 'taken':
        // Made due in the inbox, in the kept copy's place: recovery delivers it (its expectation settled).
        return {
          status: 200,
          body: OK_BODY,
          after: () =>
            logger.info(
              { transaction_id: notification.transaction_id, state: notification.state },
              'IPN took the place of an unexpected copy kept under its key (another record): delivered',
            ),
        };
      case 'claimed': {
        const { leaseId, conflict, expectation } = admission;
        return {
          status: 200,
          body: OK_BODY,
          after: () => delivery.dispatch(notification, leaseId, conflict, span?.parent, expectation),
        };
      }
    }
  }

  /** One request's answer; not `async` itself, so that an untraced POST costs no promise more. */
  function handle(request: IpnRequest): Promise<IpnOutcome> {
    delivery.start();
    unprotected.started();
    if (request.method === 'GET' || request.method === 'HEAD')
      return Promise.resolve({ status: 200, body: OK_BODY });
    if (request.method !== 'POST') {
      const message = `${request.method} is not allowed here: the payment service POSTs notifications`;
      return Promise.resolve({
        status: 405,
        headers: { Allow: ALLOW },
        body: { error: 'method_not_allowed', message },
      });
    }
    if (closed) return Promise.resolve(unavailable('closed'));
    const span = startRequestSpan();
    return span === undefined ? handlePost(request, undefined) : handleTraced(request, span);
  }

  /** A POST in its own span, ended with the answer's status and outcome. */
  async function handleTraced(request: IpnRequest, span: RequestSpan): Promise<IpnOutcome> {
    let outcome: IpnOutcome | undefined;
    try {
      outcome = await span.within(() => handlePost(request, span));
      return outcome;
    } finally {
      // A throw is the core's 500 (a bug of ours).
      span.end(outcome?.status ?? 500, outcome === undefined ? 'internal_error' : outcomeOf(outcome));
    }
  }

  /** A POST: the notification read, checked, claimed and answered; `span` is the request's, when traced. */
  async function handlePost(request: IpnRequest, span: RequestSpan | undefined): Promise<IpnOutcome> {
    if (secrets) {
      if (!matchesSecret(request.token, secrets)) {
        const missing = request.token === undefined;
        const message = `the IPN address token is ${missing ? 'missing' : 'wrong'}: give the service the address ipnUrl() builds`;
        const outcome = reject({ reason: 'unauthorized', status: 401, message, received: undefined });
        const { after } = outcome;
        // Besides this request's own line: the one warning that says the secret itself may be wrong.
        outcome.after = () => {
          after?.();
          tokenWarning.refused(missing);
        };
        return outcome;
      }
      tokenWarning.matched();
    }
    const read = await readRecord(request, limit);
    if (read.kind === 'consumed') return bodyUnavailable();
    if (read.kind === 'refused') return reject(read.event);
    if (authentication && !(await authentication.check(authenticateInput(request, read)))) {
      const message = 'the notification failed authentication: its signature is missing or does not match';
      return reject({ reason: 'unauthorized', status: 401, message, received: undefined });
    }

    const validated = parseNotification(read.record);
    if (!validated.success) {
      const issues = toFieldIssues(validated.error);
      const message = `the notification is invalid: ${issues.map((i) => `${i.path || 'body'}: ${i.message}`).join('; ')}`;
      return reject({ reason: 'invalid_fields', status: 400, message, issues, received: read.record });
    }
    // A field named as the inbox's trace link is the sender's, not the service's: dropped, never kept or linked.
    const notification = withoutSentTraceparent(validated.data);
    span?.identify(notification, keyOf(notification));
    metrics?.received();
    if (closed) return unavailable('closed');
    // An expected transaction is checked before the claim: a contradicting copy must not take the key.
    const expected = delivery.expectations.inUse()
      ? await delivery.expectations.check(notification)
      : NO_EXPECTATION;
    if (expected.kind === 'mismatch') {
      return { status: 200, body: OK_BODY, after: () => delivery.rejectExpected(expected.event) };
    }
    if (expected.kind === 'unexpected') {
      // No expectation while they are in use: confirmed by one status query, or kept and not credited.
      const screened = await track(delivery.screenUnexpected(notification));
      if (screened.kind === 'held') return { status: 200, body: OK_BODY, after: screened.after };
      if (screened.kind === 'refused') return refuse(notification, screened.event);
      // At least once, its key held by a kept copy with another record, and nothing confirmed this one: never
      // kept (the key is the kept copy's), answered 503 so that the service resends it.
      if (screened.kind === 'unconfirmed') {
        const { event } = screened;
        return unavailable('unexpected', () => delivery.rejectExpected(event));
      }
      if (screened.kind !== 'go') return answer(screened, notification);
      if (closed) return unavailable('closed');
    }
    // Only a notification that matched its expectation has one to settle (or make due again): no object else.
    // Settled late (verified after the claim, or a claim landing after storeTimeoutMs): on what the store
    // holds then, one read more, so that an ipn.expect() made meanwhile is kept.
    const expectation: ExpectationHold | undefined =
      expected.kind === 'match'
        ? {
            settle: (verified) => delivery.expectations.settleLate(notification, expected, verified),
            reopen: () => delivery.expectations.reopen(notification, expected),
          }
        : undefined;
    let admission: Admission;
    if (expected.kind === 'error') admission = { kind: 'store-failed', error: expected.error };
    else {
      const admitting = admit(notification, true, span?.traceparent, expectation);
      // Only a claim still under way is in flight for close() to wait for.
      admission = admitting instanceof Promise ? await track(admitting) : admitting;
    }
    if (admission.kind === 'claimed') {
      // Verified after the answer (at most once), only once verified: a forged copy matching the expectation
      // that verification gives up on must leave it to the sweep (the genuine copy was maybe its duplicate).
      if (delivery.verifiesAfterClaim) admission = { ...admission, expectation };
      // At the claim, in this request: the expectation as just checked, written with no read (the hot path
      // of every expected notification, at least once and at most once without verify).
      else delivery.expectations.settle(notification, expected);
      if (!isFinalState(notification.state)) {
        // Only `notification` is emitted for it: say so loudly, or a new success spelling is a lost payment.
        metrics?.unknownState();
        logger.warn(
          { transaction_id: notification.transaction_id, state: notification.state },
          `IPN in state ${notification.state}, neither SUCCESSFUL nor FAILED: emitted as notification only, never as a success`,
        );
      }
    }
    return answer(admission, notification, span);
  }

  // Building the router makes no timer, id or I/O (a Worker builds it at global scope, where they throw): the
  // timers start on first use (a request, a method), or, outside Workers, from this microtask, right after
  // the caller's synchronous code, so that a long-running server takes up a crashed process's inbox at boot
  // with no request arriving. On Workers, from the first request, or `drain()` from a Cron Trigger.
  if (!isCloudflareWorkers()) {
    queueMicrotask(() => {
      try {
        delivery.start();
      } catch {
        // A runtime that forbids timers here too: they start on first use instead.
      }
    });
  }
  /** A method's call is a first use: the timers start (once), then the method runs. */
  const used =
    <A extends unknown[], R>(method: (...args: A) => R) =>
    (...args: A): R => {
      delivery.start();
      return method(...args);
    };
  const { inbox } = delivery;

  return {
    handle,
    /** How the router stands against forged notifications now, for the operator's page. */
    protection: unprotected.protection,
    reconcile: used((transactionId: string) => delivery.reconcile(transactionId)),
    expect: used((...args: Parameters<typeof delivery.expect>) => delivery.expect(...args)),
    sweep: used(() => delivery.sweep()),
    /** One bounded pass of the timers' work; starts no timer of the router's (see `IpnRouter.drain`). */
    drain: (budgetMs: number) => delivery.drain(budgetMs),
    inbox: {
      list: used(inbox.list),
      get: used(inbox.get),
      countByStatus: used(inbox.countByStatus),
      replay: used(inbox.replay),
      replayDead: used(inbox.replayDead),
      replayMatching: used(inbox.replayMatching),
      replayProgress: used(inbox.replayProgress),
      pause: used(inbox.pause),
      resume: used(inbox.resume),
      isPaused: inbox.isPaused,
      purge: used(inbox.purge),
      recordAction: used(inbox.recordAction),
      actions: used(inbox.actions),
    } satisfies typeof inbox,
    /**
     * Answers 503 from now on and takes up no new work (recovery, a drain, a sweep), waits for the claims in
     * flight (each bounded by `storeTimeoutMs`), then for `beforeStop` (the core's wait for the work after
     * the answers given, and for `background`: the batch a drain or recovery is running, the sweep's pass),
     * stops the timers
     * and lets go of the notifications still being verified, then waits for `beforeStoreClose` (the core's
     * wait for `writes`, the store writes the router started and awaited nowhere, those letting go among
     * them; without it, at most `storeTimeoutMs`), then closes the store, if it has a `close`, waiting for it
     * at most `storeTimeoutMs`: a `close()` that never settles is reported (`error`), not waited on forever.
     */
    close: async (
      beforeStop?: (background: Promise<void>) => Promise<void>,
      beforeStoreClose?: (writes: PendingWrites) => Promise<void>,
    ): Promise<void> => {
      closed = true;
      // No new inbox batch, verification retry or sweep from now on; the ones running are waited for too.
      const background = delivery.stop();
      await Promise.allSettled([...inflight]);
      await beforeStop?.(background); // the work after the answers already given, while the store is still open
      delivery.close();
      // A key released or an expectation made due again once the store closed is lost: the key stays
      // claimed for ttlMs, and the service's resend is answered as a duplicate.
      if (beforeStoreClose) await beforeStoreClose(delivery.writes);
      else await delivery.writes.settled(storeTimeoutMs);
      try {
        const message = `the store's close() did not settle within ${storeTimeoutMs} ms (storeTimeoutMs)`;
        await within(
          Promise.resolve().then(() => store.close?.()),
          storeTimeoutMs,
          () => new StoreError(message),
        );
      } catch (cause) {
        const error =
          cause instanceof StoreError
            ? cause
            : new StoreError(`the store's close() failed: ${messageOf(cause)}`, { cause });
        logger.error({ err: loggableError(error, undefined) }, error.message);
        emit('error', { error });
      }
    },
  };
}
