import type { CustomDataError, FieldIssue, IpnKitError } from '../shared/errors.js';
import type { IpnNotification } from '../notification/schema.js';
import type { RejectedEvent } from '../status/verify-notification.js';
import type { StatusRecord } from '../status/status-envelope.js';
import type { DeliveryTransaction } from '../stores/store.js';
import type { AlertEvent } from '../observability/alert-event.js';

export type { AlertEvent } from '../observability/alert-event.js';

/**
 * What every listener of `successful`, `failed` and `notification` learns about the delivery attempt.
 * @inline
 */
export interface AttemptInfo {
  /** The notification's inbox and dedupe key: `transaction_id:state`. */
  key: string;
  /**
   * A stable key for your own calls to other APIs (an SMS, a fulfilment request, a refund) made from this
   * listener: the same for every attempt, retry and replay of this transaction's state, on every instance
   * and after a restart, and different for each (transaction, state). It is the SHA-256 of `key`, in
   * lowercase hex (64 characters of `0-9a-f`), so it is safe in an `Idempotency-Key` header whatever
   * characters the `transaction_id` holds. Add your own suffix when one listener makes several calls
   * (`${idempotencyKey}-sms`).
   */
  idempotencyKey: string;
  /**
   * Which attempt this is: 1 at first; at-least-once, counts each retry (a replay starts over at 1).
   */
  attempt: number;
}

/**
 * The second argument of a `successful`, `failed` or `notification` listener. At least once, with a store
 * that opens a transaction for each delivery attempt, `tx` is that transaction: what a listener writes
 * through it commits together with the mark that says this notification was delivered, or rolls back with
 * it. With `PostgresStore({ pool })`, `tx` and `db` are both the `pg` client inside it; given your ORM's
 * `transactions` (`ipn-kit/orm`), `tx` is the ORM's own transaction object (a Prisma transaction client, a
 * Drizzle transaction, a TypeORM `EntityManager`, ...) and there is no `db`. Every other store and mode
 * passes neither (`Tx` is `never`).
 */
export type ListenerContext<Tx = never, Db = never> = [Tx] extends [never]
  ? AttemptInfo & { tx?: undefined; db?: undefined }
  : [Db] extends [never]
    ? AttemptInfo & { tx: Tx; db?: undefined }
    : AttemptInfo & { tx: Tx; db: Db };

/** A store that opens a delivery transaction for each attempt, whose `tx` (and `db`) listeners get. */
export interface TransactionalStore<Tx, Db> {
  /** Opens the transaction of one attempt at `key`, held by `leaseId`; `undefined` when it cannot. */
  begin(key: string, leaseId: string): Promise<DeliveryTransaction<Tx, Db> | undefined>;
}

/**
 * The listener context a router gets from its store and delivery mode: a `tx` only from a store that opens
 * delivery transactions (`begin`), at least once.
 */
export type ListenerContextOf<St, D> = D extends 'at-least-once'
  ? St extends TransactionalStore<infer Tx, infer Db>
    ? ListenerContext<Tx, Db>
    : ListenerContext
  : ListenerContext;

/**
 * What `customData` adds when the router has a `customData` schema: either the parsed value, or the reason
 * it could not be parsed (the payment is emitted either way). Test `customDataError` first to narrow.
 */
export type CustomDataFields<C> = [C] extends [undefined]
  ? unknown
  : | {
        /** `custom_data` parsed by your `customData` schema: its output type. */
        customData: C;
        /** Absent when `customData` is set. */
        customDataError?: undefined;
      }
    | {
        /** Absent when `custom_data` did not match the schema. */
        customData?: undefined;
        /** Why `custom_data` did not match the schema (or the schema threw): the payment still happened. */
        customDataError: CustomDataError;
      };

/** What a listener receives: the validated notification, plus `customData` when a schema was given. */
export type Notification<C = undefined> = IpnNotification & CustomDataFields<C>;

/**
 * Why a request was rejected.
 * @inline
 */
export type InvalidReason =
  | 'malformed_body'
  | 'not_an_object'
  | 'invalid_fields'
  | 'body_too_large'
  | 'unsupported_media_type'
  | 'request_aborted'
  | 'unauthorized';

/** Payload of the `invalid` event. */
export interface InvalidEvent {
  reason: InvalidReason;
  /** The HTTP status answered (400, 401, 413 or 415). */
  status: number;
  message: string;
  /** For `invalid_fields`: each field that failed. */
  issues?: readonly FieldIssue[];
  /**
   * What was received: the parsed body (without its fields nested more than 64 levels deep, when that is
   * why), an excerpt of the raw text, or `undefined` when it was not read.
   */
  received: unknown;
}

/** Payload of the `error` event. */
export interface ErrorEvent<C = undefined> {
  /**
   * A `StoreError`, `ListenerError`, `BodyUnavailableError`, `VerificationError` or `DeliveryError` (or, for a
   * bug, an `IpnKitError` with code `IPN_INTERNAL`); its `cause` is the original error.
   */
  error: IpnKitError;
  /** The notification being handled, when there was one. */
  notification?: Notification<C> | IpnNotification;
}

/** Payload of the `dead` event (at-least-once): a notification whose every delivery attempt failed. */
export interface DeadEvent<C = undefined> {
  /** Its inbox key, for `ipn.inbox.replay(key)`. */
  key: string;
  notification: Notification<C> | IpnNotification;
  attempts: number;
  /** The last failure's message. */
  lastError: string;
}

/**
 * Why the sweep gave up on an expected transaction: the `reason` of a `stale` event.
 * @inline
 */
export type StaleReason =
  /** The service still reported a non-final state at every query. */
  | 'not_final'
  /** The service did not know the transaction at any query. */
  | 'not_found'
  /**
   * The status query failed at the last attempt (network, 5xx), or its record lacked the amount or
   * `custom_data` while a copy kept as unexpected (at least once) holds the transaction's key: a partial record
   * neither confirms nor contradicts it (once checked, `ipn.inbox.replay(key, ['failed'])`).
   */
  | 'unavailable'
  /** The router has no status client to ask (neither `statusClient` nor `verify`). */
  | 'no_status_client';

/**
 * Payload of the `stale` event: an expected transaction (`ipn.expect()`) for which no final notification
 * came and the sweep could not reconcile it within `reconcileAttempts` status queries. It is forgotten
 * after this event: look into it (the service's back office, `ipn.reconcile(transactionId)` later).
 */
export interface StaleEvent {
  /** The expected transaction. */
  transactionId: string;
  /** Why the sweep gave up on it. */
  reason: StaleReason;
  /** The same, in words, with the number of queries made. */
  message: string;
  /** The `custom_data` given to `ipn.expect()`, when given. */
  customData?: string | undefined;
  /** The amount given to `ipn.expect()`, when given. */
  amount?: number | undefined;
  /** When `ipn.expect()` was called. */
  expectedAt: Date;
  /** Status queries made for it. */
  attempts: number;
  /** The service's last answer, when it found the transaction (a non-final state such as `PENDING1`). */
  status?: StatusRecord;
}

/**
 * Payload of the `conflict` event: a notification that contradicts the state already accepted for its
 * transaction (a `FAILED` after a `SUCCESSFUL`). It is answered 200, so the service stops resending it, and
 * never emitted as `failed`: a paid order is never undone by it.
 */
export interface ConflictEvent<C = undefined> {
  /** The contradicting notification, as received. */
  notification: Notification<C> | IpnNotification;
  /** The state already accepted for this `transaction_id`. */
  accepted: 'SUCCESSFUL';
  /**
   * What one status query says of the transaction now, when a status client is configured and its budget
   * allowed the query; absent otherwise.
   */
  status?: StatusRecord;
  /** The same, in words. */
  message: string;
}

/** The events of an IPN router and the payload each listener receives. */
export interface IpnEvents<C = undefined, X = ListenerContext> {
  /** A first delivery in state SUCCESSFUL: credit the order (through `context.tx`, when there is one). */
  successful: (notification: Notification<C> & { state: 'SUCCESSFUL' }, context: X) => unknown;
  /** A first delivery in state FAILED: release or cancel the order. */
  failed: (notification: Notification<C> & { state: 'FAILED' }, context: X) => unknown;
  /** Every first delivery, whatever its state (before `successful` / `failed`); other states are never success. */
  notification: (notification: Notification<C>, context: X) => unknown;
  /**
   * A copy of a notification already in hand (same `transaction_id` and `state`): dropped. Handled, or (at
   * least once) still in the inbox: kept unexpected, or, with `verify`, dead or retried unverified, which
   * the copy made due again (the entry's own events follow): not a sign that the payment was credited.
   */
  duplicate: (notification: IpnNotification) => unknown;
  /** A rejected request. */
  invalid: (event: InvalidEvent) => unknown;
  /** A listener failed, or the store did, or a notification could not be verified in time. */
  error: (event: ErrorEvent<C>) => unknown;
  /**
   * A notification the service's record (with `verify`) or its expectation (`ipn.expect()`) contradicts:
   * forged or altered. Never credited.
   */
  rejected: (event: RejectedEvent) => unknown;
  /** An expected transaction the reconciliation sweep could not settle within its bound. */
  stale: (event: StaleEvent) => unknown;
  /** With `delivery: 'at-least-once'`: every attempt failed; the notification is kept as `dead` for a replay. */
  dead: (event: DeadEvent<C>) => unknown;
  /**
   * A notification that contradicts the state already accepted for its transaction (a `FAILED` after a
   * `SUCCESSFUL`): answered 200, never emitted as `failed`.
   */
  conflict: (event: ConflictEvent<C>) => unknown;
  /**
   * A condition an operator must hear of started (`state: 'firing'`) or ended (`'resolved'`): deliveries
   * failing, dead entries, a backlog, stale expectations, forged notifications, a status query refused,
   * conflicts. Told once at each end, never once per notification; nothing is measured while no listener is
   * added. `alertWebhook()` and `alertLogger()` are ready listeners.
   */
  alert: (event: AlertEvent) => unknown;
}

/** An event name of {@link IpnEvents}. */
export type IpnEventName = keyof IpnEvents;

/**
 * Every event name a router emits, in the order of {@link IpnEvents}. A `Record` over the names, so that
 * adding an event to the interface without adding it here fails to compile.
 */
const EVENTS: Record<IpnEventName, true> = {
  successful: true,
  failed: true,
  notification: true,
  duplicate: true,
  invalid: true,
  error: true,
  rejected: true,
  stale: true,
  dead: true,
  conflict: true,
  alert: true,
};

/** The known event names, for the check that turns a typo (`'success'`) into a `TypeError`. */
export const IPN_EVENT_NAMES: readonly IpnEventName[] = Object.freeze(Object.keys(EVENTS) as IpnEventName[]);

/** Whether `name` is one of {@link IPN_EVENT_NAMES}. */
export function isIpnEventName(name: unknown): name is IpnEventName {
  return typeof name === 'string' && Object.hasOwn(EVENTS, name);
}
