import { createHash } from 'node:crypto';
import type { StandardSchemaV1 } from '../notification/standard-schema.js';
import { parseCustomData } from '../notification/custom-data.js';
import { IpnKitError, messageOf, StoreError } from '../shared/errors.js';
import type { Notification } from './events.js';
import type { ResolvedOptions } from '../config/options.js';
import { identify, type Emit, type EmitAndWait, type Track } from './safe-emitter.js';
import type { IpnNotification } from '../notification/schema.js';
import { loggableError } from '../observability/redact.js';
import { isQuiet, rootStack } from '../observability/logger.js';
import type { RejectedEvent } from '../status/verify-notification.js';
import { createPendingWrites } from './pending-writes.js';
import { within } from '../shared/within.js';

/** The router's emitters: fire-and-forget, fire-then-await-every-listener, and track what listeners start. */
export interface Emitters<C> {
  emit: Emit<C>;
  emitAndWait: EmitAndWait<C>;
  track: Track;
}

/** The dedupe key of a notification: `transaction_id:state`. */
export const keyOf = (n: IpnNotification): string => `${n.transaction_id}:${n.state}`;

/**
 * The `idempotencyKey` of a listener's context for the dedupe key `key`: the SHA-256 of `key` in hex, the
 * same on every attempt, instance and restart (it depends on nothing else).
 */
export const idempotencyKeyOf = (key: string): string => createHash('sha256').update(key).digest('hex');

export { identify } from './safe-emitter.js';

/**
 * What the delivery steps share: the options, the emitters, timers that `close()` clears, and the ways to
 * report, reject, release and emit a notification.
 */
export function createDeliveryContext<C>(
  options: ResolvedOptions<StandardSchemaV1 | undefined>,
  { emit, emitAndWait, track }: Emitters<C>,
) {
  const { store, logger, customData: schema } = options;
  const timers = new Set<NodeJS.Timeout>();
  /** The store writes started here and awaited nowhere: `close()` waits for them before closing the store. */
  const writes = createPendingWrites();
  let closed = false;

  const report = (error: IpnKitError, notification?: IpnNotification): void => {
    const err = options.logCustomerData ? error : loggableError(error, notification);
    const message = options.logCustomerData ? error.message : (err.message as string);
    logger.error({ err, ...(notification && identify(notification)) }, message);
    // One line per failure; where it began, for whoever logs at debug.
    if (!isQuiet(logger.debug)) {
      logger.debug(
        { stack: rootStack(err), ...(notification && identify(notification)) },
        `stack: ${message}`,
      );
    }
    emit('error', { error, notification });
  };
  const toEvent = (n: IpnNotification): Notification<C> =>
    (schema ? { ...n, ...parseCustomData(schema, n.custom_data) } : n) as Notification<C>;

  return {
    options,
    logger,
    emit,
    emitAndWait,
    report,
    toEvent,
    isClosed: () => closed,
    /**
     * A store call bounded by `storeTimeoutMs`: past it, rejects with a `StoreError` saying the store did not
     * `what` in time (the call goes on; its late answer changes nothing here). A value already there (a store
     * that answers at once, as MemoryStore does) makes no timer.
     */
    bounded: <T>(pending: T | Promise<T>, what: string): T | Promise<T> =>
      pending instanceof Promise
        ? within(
            pending,
            options.storeTimeoutMs,
            () =>
              new StoreError(
                `the store did not ${what} within ${options.storeTimeoutMs} ms (storeTimeoutMs)`,
              ),
          )
        : pending,
    /** The store writes started and awaited nowhere, which `close()` waits for (at most its `timeoutMs`). */
    writes,
    /**
     * Counts a store write nobody awaits (a release, an expectation's settle or reopen, a late claim's
     * decision) until it settles, so that `close()` waits for it before closing the store. The caller still
     * handles its failure (reported, never an unhandled rejection).
     */
    write: <T>(pending: Promise<T>): Promise<T> => writes.add(pending),

    /** Runs `run` after `ms`, unless closed first; the timer never keeps the process alive. */
    after: (ms: number, run: () => unknown): void => {
      if (closed) return;
      const timer = setTimeout(() => {
        timers.delete(timer);
        run();
      }, ms);
      timer.unref();
      timers.add(timer);
    },

    /** Runs `run` every `ms` until closed, without keeping the process alive. */
    every: (ms: number, run: () => unknown): void => {
      const interval = setInterval(run, ms);
      interval.unref();
      timers.add(interval);
    },

    /**
     * A promise nobody needs to await: a failure (a bug of ours) is reported, never an unhandled rejection.
     * Resolves once it has settled (for a `waitUntil`); never rejects.
     */
    detach: (pending: Promise<unknown>): Promise<void> =>
      pending.then(
        () => undefined,
        (cause: unknown) => {
          const message = `ipn-kit failed to deliver a notification: ${messageOf(cause)}`;
          report(new IpnKitError('IPN_INTERNAL', message, { cause }));
        },
      ),

    /**
     * Frees a key, so that a genuine resend (or a reconcile) of it is processed. Never rejects. Counted
     * until it settles: `close()` waits for it (a release lost to a closed pool holds the key for `ttlMs`).
     */
    release: (key: string): Promise<void> =>
      writes.add(
        Promise.resolve()
          .then(() => store.release(key))
          .catch((cause: unknown) =>
            report(new StoreError(`the store failed to release ${key}: ${messageOf(cause)}`, { cause })),
          ),
      ),

    /** Emits `rejected`: the service's record contradicts the notification. */
    reject: (event: RejectedEvent): void => {
      logger.warn(
        { ...identify(event.notification), reason: event.reason, fields: event.mismatches },
        event.message,
      );
      emit('rejected', event);
    },

    /**
     * Emits the notification's events at once (at-most-once). Resolves once the listeners have settled
     * (nothing waits for that but a `waitUntil`); never rejects.
     */
    emitNow: (n: IpnNotification): Promise<void> =>
      track(() => {
        const event = toEvent(n);
        const key = keyOf(n);
        const attempt = { key, idempotencyKey: idempotencyKeyOf(key), attempt: 1 };
        if (!isQuiet(logger.debug)) logger.debug(identify(n), 'IPN notification delivered');
        emit('notification', event, attempt);
        let heard = true;
        if (event.state === 'SUCCESSFUL')
          heard = emit('successful', event as Notification<C> & { state: 'SUCCESSFUL' }, attempt);
        else if (event.state === 'FAILED')
          heard = emit('failed', event as Notification<C> & { state: 'FAILED' }, attempt);
        // Answered 200 already, and never sent again: say so, or a missing listener loses payments silently.
        if (!heard) {
          const name = event.state === 'SUCCESSFUL' ? 'successful' : 'failed';
          logger.warn(
            identify(n),
            `a ${event.state} notification was emitted with no '${name}' listener: it was acknowledged and ` +
              `the service will not send it again. Add ipn.on('${name}', ...) before the router serves requests`,
          );
        }
      }),

    /** Stops every timer; later `after` calls do nothing. */
    close: (): void => {
      closed = true;
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
    },
  };
}

/** What {@link createDeliveryContext} returns. */
export type DeliveryContext<C> = ReturnType<typeof createDeliveryContext<C>>;
