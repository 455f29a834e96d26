/**
 * The `code` of a status-query failure ({@link StatusError} and its subclasses): the service does not know
 * the transaction, the query failed, or it was refused locally to avoid a block.
 * @inline
 */
export type StatusErrorCode =
  'IPN_TRANSACTION_NOT_FOUND' | 'IPN_STATUS_QUERY_FAILED' | 'IPN_STATUS_RATE_LIMITED';

/**
 * Every `code` an ipn-kit error carries, so that a typo in a comparison (`error.code === 'IPN_STORE_FAIL'`)
 * does not type-check. Each is stable across versions; docs/errors.md says when each happens.
 */
export type IpnKitErrorCode =
  | 'IPN_STORE_FAILED'
  | 'IPN_LISTENER_FAILED'
  | 'IPN_CUSTOM_DATA_INVALID'
  | 'IPN_BODY_UNAVAILABLE'
  | 'IPN_VERIFY_UNAVAILABLE'
  | 'IPN_DELIVERY_FAILED'
  | 'IPN_INTERNAL'
  | 'IPN_NO_STATUS_CLIENT'
  | 'IPN_NOT_DURABLE'
  | 'IPN_CLOSED'
  | 'IPN_VERIFY_BUSY'
  | 'IPN_NO_EXPECTATIONS'
  | 'IPN_PURGE_INSIDE_DEDUPE_WINDOW'
  | StatusErrorCode;

/**
 * Base class of every error ipn-kit creates. `code` is stable across versions: match on it, not on the
 * message.
 *
 * @example
 * ipn.on('error', ({ error }) => {
 *   if (error.code === 'IPN_STORE_FAILED') alertOnCall(error);
 * });
 */
export class IpnKitError extends Error {
  override name: string = 'IpnKitError';
  /** Stable, machine-readable identifier of the failure kind: one of {@link IpnKitErrorCode}. */
  readonly code: IpnKitErrorCode;

  constructor(code: IpnKitErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

/**
 * The dedupe store threw, rejected, or did not answer in time. The request was answered 503. The stores
 * reject with it too (a `PostgresStore` or `RedisStore` call whose driver failed). Its `cause` is the
 * original error, the driver's: a `StoreError` made from another one takes that one's `cause`, so that the
 * router's `error` event carries the driver's error (its `code`, its `detail`) one level down, as it
 * always did, whichever layer wrapped it first.
 */
export class StoreError extends IpnKitError {
  override name = 'StoreError' as const;
  declare readonly code: 'IPN_STORE_FAILED';

  /**
   * The store's tables do not exist yet: `store.migrate()` has not run (or its tables were dropped). A store
   * says so, whatever its database's own code for it, so that the router can tell a first start that comes
   * before `migrate()` from an outage. Kept when a `StoreError` wraps another.
   */
  readonly notMigrated: boolean;

  constructor(message: string, options?: { cause?: unknown; notMigrated?: boolean }) {
    const cause = options?.cause;
    const inner = cause instanceof StoreError ? cause : undefined;
    const original =
      inner && 'cause' in inner
        ? { cause: inner.cause }
        : options && 'cause' in options
          ? { cause }
          : undefined;
    super('IPN_STORE_FAILED', message, original);
    this.notMigrated = options?.notMigrated ?? inner?.notMigrated ?? false;
  }
}

/** A listener threw or its promise rejected. The answer to the service was not affected. */
export class ListenerError extends IpnKitError {
  override name = 'ListenerError' as const;
  declare readonly code: 'IPN_LISTENER_FAILED';
  /** The event whose listener failed. */
  readonly event: string;

  constructor(event: string, cause: unknown) {
    super('IPN_LISTENER_FAILED', `a listener of '${event}' failed: ${messageOf(cause)}`, { cause });
    this.event = event;
  }
}

/**
 * `custom_data` did not match the `customData` schema, neither as JSON nor as the raw string. The payment is
 * still emitted; this error is attached to it as `customDataError`.
 */
export class CustomDataError extends IpnKitError {
  override name = 'CustomDataError' as const;
  declare readonly code: 'IPN_CUSTOM_DATA_INVALID';
  /** The field problems reported by the schema, as `{ path, message }`. */
  readonly issues: readonly FieldIssue[];

  constructor(issues: readonly FieldIssue[], cause: unknown) {
    const detail = issues.map((i) => (i.path ? `${i.path}: ${i.message}` : i.message)).join('; ');
    super('IPN_CUSTOM_DATA_INVALID', `custom_data does not match the customData schema: ${detail}`, {
      cause,
    });
    this.issues = issues;
  }
}

/** The host app consumed the request body without leaving it on `req.body`, so there is nothing to read. */
export class BodyUnavailableError extends IpnKitError {
  override name = 'BodyUnavailableError' as const;
  declare readonly code: 'IPN_BODY_UNAVAILABLE';

  constructor() {
    super(
      'IPN_BODY_UNAVAILABLE',
      'the request body was already consumed by another middleware and req.body is empty: mount the IPN router ' +
        'before that middleware (app.use("/ipn", ipn) first), or exclude the IPN path from it',
    );
  }
}

/**
 * One problem with one field, as reported in a 400 answer and in `invalid` events.
 * @inline
 */
export interface FieldIssue {
  /** Dotted path of the field (`transaction_id`), or `''` for the whole body. */
  readonly path: string;
  readonly message: string;
}

/**
 * The message of anything thrown: an Error's message (or any object's string `message`), or the thrown value
 * as text. Never throws, whatever was thrown: a null-prototype object, a Symbol, an object whose `toString`
 * or `message` getter throws, a revoked Proxy.
 */
export function messageOf(cause: unknown): string {
  try {
    if (typeof cause === 'string') return cause;
    if (typeof cause === 'object' && cause !== null) {
      const { message } = cause as { message?: unknown };
      if (typeof message === 'string') return message;
      if (cause instanceof Error) return message === undefined ? '' : textOf(message);
    }
    return textOf(cause);
  } catch {
    return UNPRINTABLE;
  }
}

const UNPRINTABLE = '(a thrown value that cannot be shown as text)';

/** `String(value)`, or its `[object Tag]` when that throws (a null-prototype object, a throwing `toString`). */
function textOf(value: unknown): string {
  try {
    const text: unknown = String(value);
    if (typeof text === 'string') return text;
  } catch {
    // Fall through to the tag, which calls no method of the value's own.
  }
  try {
    return Object.prototype.toString.call(value);
  } catch {
    return UNPRINTABLE;
  }
}

/**
 * Base class of every status-query failure (`TransactionNotFoundError`, `StatusQueryError`,
 * `StatusRateLimitError`): catch this one to handle them all, then switch on `code`.
 */
export class StatusError extends IpnKitError {
  override name: string = 'StatusError';
  declare readonly code: StatusErrorCode;
  /** The transaction asked about. */
  readonly transactionId: string;

  constructor(code: StatusErrorCode, transactionId: string, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
    this.transactionId = transactionId;
  }
}

/** The service does not know this transaction (or it was created under another API key). */
export class TransactionNotFoundError extends StatusError {
  override name = 'TransactionNotFoundError' as const;
  declare readonly code: 'IPN_TRANSACTION_NOT_FOUND';

  constructor(transactionId: string) {
    super(
      'IPN_TRANSACTION_NOT_FOUND',
      transactionId,
      `the payment service does not know transaction ${transactionId} (unknown id, or one created under another API key)`,
    );
  }
}

/**
 * What the service (or the network) answered to a status query that failed.
 * @inline
 */
export interface StatusQueryFailure {
  /** The HTTP status, or `undefined` when no answer came (network error, timeout). */
  httpStatus?: number | undefined;
  /** The envelope's `statut_code`, when the body was an envelope. */
  statutCode?: number | undefined;
  /** The envelope's `message`, when there was one. */
  serviceMessage?: string | undefined;
  /** Whether asking again later may succeed (network errors, 5xx, a block). */
  retryable: boolean;
  /** Whether the answer looks like the service blocking this caller (429 or 403, as HTTP status or `statut_code`). */
  blocked?: boolean | undefined;
  /** A redirect's `Location` (never followed), for the operator. */
  location?: string | undefined;
}

/** A status query failed: an HTTP error, a `statut_code` other than 200 or 404, a body that is not the envelope, a timeout. */
export class StatusQueryError extends StatusError {
  override name = 'StatusQueryError' as const;
  declare readonly code: 'IPN_STATUS_QUERY_FAILED';
  readonly httpStatus: number | undefined;
  readonly statutCode: number | undefined;
  readonly serviceMessage: string | undefined;
  readonly retryable: boolean;
  /** The answer looked like a block: the client sends nothing during its cool-down. */
  readonly blocked: boolean;
  /** The answer was a redirect (never followed): where it pointed. */
  readonly location: string | undefined;

  constructor(
    transactionId: string,
    message: string,
    failure: StatusQueryFailure,
    options?: { cause?: unknown },
  ) {
    super('IPN_STATUS_QUERY_FAILED', transactionId, message, options);
    this.httpStatus = failure.httpStatus;
    this.statutCode = failure.statutCode;
    this.serviceMessage = failure.serviceMessage;
    this.retryable = failure.retryable;
    this.blocked = failure.blocked === true;
    this.location = failure.location;
  }
}

/**
 * Refused locally, without asking the service: the query budget is spent, or the service looked like it was
 * blocking this caller and the cool-down is running. Nothing was sent.
 */
export class StatusRateLimitError extends StatusError {
  override name = 'StatusRateLimitError' as const;
  declare readonly code: 'IPN_STATUS_RATE_LIMITED';
  /** Milliseconds until a query may be sent again. */
  readonly retryAfterMs: number;
  /**
   * `budget`: `maxQueriesPerMinute` is spent; `blocked`: the service answered 429 or 403 and the cool-down
   * runs; `guard_unavailable`: the shared guard (`shared: redisGuard(...)`) is unreachable and no fallback
   * budget is configured, so nothing is sent rather than risk a block; `interval`: the caller needs a newer
   * answer than the cached one (`since`), and the id was asked less than `minIntervalMs` ago.
   */
  readonly reason: 'budget' | 'blocked' | 'guard_unavailable' | 'interval';

  constructor(
    transactionId: string,
    reason: 'budget' | 'blocked' | 'guard_unavailable' | 'interval',
    retryAfterMs: number,
  ) {
    const why =
      reason === 'budget'
        ? 'the status query budget (maxQueriesPerMinute) is spent'
        : reason === 'blocked'
          ? 'the payment service answered as if it were blocking this caller, and the cool-down is running'
          : reason === 'interval'
            ? 'a newer answer than the last one is needed, and this id was asked less than minIntervalMs ago'
            : 'the shared guard is unreachable and no fallback budget is configured (fallbackInstances)';
    super(
      'IPN_STATUS_RATE_LIMITED',
      transactionId,
      `status query for ${transactionId} refused locally: ${why}; retry in ${Math.ceil(retryAfterMs / 1000)} s`,
    );
    this.reason = reason;
    this.retryAfterMs = retryAfterMs;
  }
}

/**
 * A notification could not be verified in time: the status query kept failing (service unreachable, budget
 * spent, a block) through every attempt. It was not emitted; its key was released, so a resend or
 * `ipn.reconcile(id)` can still deliver it. The `error` event carries the notification.
 */
export class VerificationError extends IpnKitError {
  override name = 'VerificationError' as const;
  declare readonly code: 'IPN_VERIFY_UNAVAILABLE';

  constructor(transactionId: string, attempts: number, cause: unknown) {
    super(
      'IPN_VERIFY_UNAVAILABLE',
      `could not verify the notification of ${transactionId} after ${attempts} attempts (${messageOf(cause)}): ` +
        `it was not emitted; reconcile it with ipn.reconcile('${transactionId}') once the service answers`,
      { cause },
    );
  }
}

/**
 * With `verify`: `maxPendingVerifications` notifications were already being verified, so a new one was
 * answered 503 (with `Retry-After`) before its key was claimed: the service resends it later, while a
 * forger's flood is simply dropped. The `error` event carries the notification.
 */
export class VerificationBusyError extends IpnKitError {
  override name = 'VerificationBusyError' as const;
  declare readonly code: 'IPN_VERIFY_BUSY';

  constructor(transactionId: string, pending: number) {
    super(
      'IPN_VERIFY_BUSY',
      `${pending} notifications are already being verified (maxPendingVerifications): the notification of ` +
        `${transactionId} was answered 503, so that the service resends it later`,
    );
  }
}

/**
 * At-least-once: a delivery attempt failed (a listener failed or timed out, or there was no listener). One
 * per failed attempt: when listeners failed, the message is theirs (redacted as logs are, unless
 * `logCustomerData`) and `cause` is the first one's `ListenerError`.
 */
export class DeliveryError extends IpnKitError {
  override name = 'DeliveryError' as const;
  declare readonly code: 'IPN_DELIVERY_FAILED';

  constructor(message: string, options?: { cause?: unknown }) {
    super('IPN_DELIVERY_FAILED', message, options);
  }
}

/**
 * A purge of delivered entries (`ipn.inbox.purge(before)`, the operator's page, `ipn-kit inbox purge`) was
 * refused: `before` is later than `ttlMs` ago, inside the dedupe window. A delivered entry is what makes a
 * resend a duplicate, and the service resends a notification until it gets a 200, possibly days later: a
 * resend of a purged one would be delivered, and credited, a second time. Nothing was deleted. Purge before
 * `dedupeWindowStart`, or ask for it explicitly (`{ insideDedupeWindow: true }`, the page's confirmation
 * box, `--inside-dedupe-window`). Dead entries' purges are not refused.
 */
export class PurgeWindowError extends IpnKitError {
  override name = 'PurgeWindowError' as const;
  declare readonly code: 'IPN_PURGE_INSIDE_DEDUPE_WINDOW';
  /** The purge's date. */
  readonly before: Date;
  /** Where the dedupe window starts (`ttlMs` ago): a purge before it, or at it, is not refused. */
  readonly dedupeWindowStart: Date;
  /** The dedupe window's length: the router's `ttlMs` (the CLI's `--ttl-ms`). */
  readonly ttlMs: number;

  /** `anyway`: how the caller asks for the purge explicitly, in its own words (an option, a box, a flag). */
  constructor(before: Date, dedupeWindowStart: Date, ttlMs: number, anyway: string) {
    super(
      'IPN_PURGE_INSIDE_DEDUPE_WINDOW',
      `refused to purge the delivered entries delivered before ${before.toISOString()}: that is inside the ` +
        `dedupe window (ttlMs, ${durationText(ttlMs)}), which starts at ${dedupeWindowStart.toISOString()}. ` +
        'A delivered entry is what makes a resend a duplicate, and the service resends a notification until ' +
        'it gets a 200, possibly days later: a resend of a purged one would be delivered, and credited, a ' +
        `second time. Nothing was deleted. Purge before ${dedupeWindowStart.toISOString()} or earlier, or, ` +
        `once you know the service can no longer resend them, ${anyway}`,
    );
    this.before = before;
    this.dedupeWindowStart = dedupeWindowStart;
    this.ttlMs = ttlMs;
  }
}

/** `7 days`, `36 hours`, `90 minutes`, or `1500 ms`: a duration as a person reads it. */
function durationText(ms: number): string {
  const units: Array<[number, string]> = [
    [86_400_000, 'day'],
    [3_600_000, 'hour'],
    [60_000, 'minute'],
    [1000, 'second'],
  ];
  for (const [size, unit] of units) {
    if (ms >= size && ms % size === 0) return `${ms / size} ${unit}${ms === size ? '' : 's'}`;
  }
  return `${ms} ms`;
}
