import type { Readable } from 'node:stream';

/** A request as the pipeline sees it: no framework objects, only values and the body stream. */
export interface IpnRequest {
  method: string;
  contentType?: string | undefined;
  contentLength?: string | undefined;
  contentEncoding?: string | undefined;
  /** The `token` query parameter of the address, for `secret`. */
  token?: string | undefined;
  /** The request's headers, names in lower case (for `authenticate`). */
  headers?: Readonly<Record<string, string | readonly string[] | undefined>> | undefined;
  /** The body stream to read, the value a host parser already left on `req.body`, or neither. */
  body: { stream: Readable } | { parsed: unknown } | { consumed: true };
}

/** The answer to give, and the work to do once it is given (emit events, deliver). */
export interface IpnOutcome {
  status: number;
  headers?: Record<string, string>;
  body?: Record<string, unknown>;
  /**
   * The outcome's own work, run once right after the answer is written, so that listeners never delay
   * the service's 200. May return a promise of the work it started (verification, delivery), which never
   * rejects. Transports never call it themselves: `serve` runs it through the core's `runAfterResponse`.
   */
  after?: () => unknown;
}

/** The methods the route answers; any other gets 405 with this `Allow`. */
export const ALLOW = 'GET, HEAD, POST';

/** The two answers nearly every request gets; `serve` writes their JSON once. */
export const OK_BODY: Record<string, unknown> = Object.freeze({ ok: true });
export const DUPLICATE_BODY: Record<string, unknown> = Object.freeze({ ok: true, duplicate: true });

/** Seconds the service is asked to wait before it resends a notification answered 503. */
const RETRY_AFTER_SECONDS = '30';

/** Why a notification is answered 503: nothing was claimed, so the service's resend is processed. */
export type Unavailable =
  'closed' | 'store_unavailable' | 'verification_busy' | 'verification_pending' | 'unexpected';

const UNAVAILABLE_MESSAGES: Readonly<Record<Unavailable, string>> = {
  closed: 'the IPN router is closed (the app is shutting down): resend it later',
  store_unavailable: 'the store did not record the notification in time: resend it later',
  verification_busy: 'too many notifications are being verified: resend it later',
  verification_pending: 'another copy of this notification is being verified: resend it later',
  unexpected: 'this transaction is not expected here yet: resend it later',
};

/** The 503 answer, with `Retry-After`, for each reason the router cannot take a notification now. */
export function unavailable(reason: Unavailable, after?: () => unknown): IpnOutcome {
  return {
    status: 503,
    headers: { 'Retry-After': RETRY_AFTER_SECONDS },
    body: { error: reason, message: UNAVAILABLE_MESSAGES[reason] },
    ...(after ? { after } : {}),
  };
}
