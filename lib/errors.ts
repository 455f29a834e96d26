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
  /** Stable, machine-readable identifier of the failure kind. */
  readonly code: string;

  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

/** The dedupe store threw, rejected, or did not answer in time. The request was answered 503. */
export class StoreError extends IpnKitError {
  override name = 'StoreError' as const;
  declare readonly code: 'IPN_STORE_FAILED';

  constructor(message: string, options?: { cause?: unknown }) {
    super('IPN_STORE_FAILED', message, options);
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

/** One problem with one field, as reported in a 400 answer and in `invalid` events. */
export interface FieldIssue {
  /** Dotted path of the field (`transaction_id`), or `''` for the whole body. */
  readonly path: string;
  readonly message: string;
}

/** The message of anything thrown: an Error's message, or the thrown value as text. */
export function messageOf(cause: unknown): string {
  return cause instanceof Error ? cause.message : String(cause);
}
