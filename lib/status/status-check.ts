import { randomInt } from 'node:crypto';
import {
  StatusQueryError,
  StatusRateLimitError,
  TransactionNotFoundError,
  type StatusError,
} from '../shared/errors.js';
import type { Logger } from '../observability/logger.js';
import { createLogThrottle } from '../observability/log-throttle.js';
import type { StatusRecord } from './status-envelope.js';

/**
 * What `client.check()` found wrong, if anything.
 * @inline
 */
export type StatusCheckVerdict =
  /** The status API answered as the service does: `baseUrl` is right (and the key, when `keyConfirmed`). */
  | 'ok'
  /** The service refused the key (401, 403), or does not know a transaction you said is yours. */
  | 'api_key'
  /** What answered is not the status API: a 404 page, HTML, a redirect, another JSON. */
  | 'base_url'
  /** No answer: DNS, connection refused, TLS, a timeout. */
  | 'unreachable'
  /** The service answered 429 (or 403 as a block): the client pauses for `blockCooldownMs`. */
  | 'blocked'
  /** Nothing was sent: the guard's budget is spent, or the shared guard is unreachable. Try later. */
  | 'rate_limited'
  /** The service failed (5xx, or a `statut_code` it does not explain). */
  | 'service_error';

/**
 * The answer of `client.check()`.
 * @inline
 */
export interface StatusCheck {
  /** `true` when the status API answered as the service does. */
  ok: boolean;
  verdict: StatusCheckVerdict;
  /**
   * Whether the API key is proven to work: only when `check({ transactionId })` found a transaction of
   * yours. An unknown id is answered "not found" whatever the key, so a made-up id proves the URL only.
   */
  keyConfirmed: boolean;
  /** What was found and what to do, in words (never the key). */
  message: string;
  /** The HTTP status answered, when there was an answer. */
  httpStatus?: number | undefined;
  /** The error behind a verdict other than `ok`. */
  error?: StatusError | undefined;
}

/**
 * Options of `client.check()`.
 * @inline
 */
export interface StatusCheckOptions {
  /** A transaction of yours that the service knows: finding it proves the key. @default a made-up id */
  transactionId?: string | undefined;
  /** With several keys: the account whose key to check. @default each key in turn */
  account?: string | undefined;
}

/**
 * Asks the status query once (through the guard) about `transactionId`, or a made-up id, and says whether
 * `baseUrl` and the key work, and if not, which one is likely wrong.
 */
export async function checkStatus(
  getStatus: (id: string) => Promise<StatusRecord>,
  options: StatusCheckOptions = {},
): Promise<StatusCheck> {
  const known = options.transactionId;
  const id = known ?? `IPNKIT.CHECK${randomInt(1e9, 1e10)}`;
  try {
    await getStatus(id);
    return {
      ok: true,
      verdict: 'ok',
      keyConfirmed: known !== undefined,
      httpStatus: 200,
      message:
        known === undefined
          ? 'the status API answered a record for a made-up id: baseUrl works; check the key with check({ transactionId })'
          : `baseUrl and apiKey work: the service found ${known}`,
    };
  } catch (cause) {
    return classify(cause, id, known !== undefined);
  }
}

function classify(cause: unknown, id: string, known: boolean): StatusCheck {
  const fail = (verdict: StatusCheckVerdict, message: string, httpStatus?: number): StatusCheck => ({
    ok: false,
    verdict,
    keyConfirmed: false,
    message,
    httpStatus,
    ...(cause instanceof Error ? { error: cause as StatusError } : {}),
  });
  if (cause instanceof TransactionNotFoundError) {
    if (known)
      return fail(
        'api_key',
        `the service does not know ${id}: the apiKey is probably wrong (a transaction created under another key is not found), or the id is not one of yours`,
        404,
      );
    return {
      ok: true,
      verdict: 'ok',
      keyConfirmed: false,
      httpStatus: 200,
      message:
        'baseUrl reaches the status API: it answered "transaction not found" for a made-up id. The key is not ' +
        'proven (an unknown id is not found whatever the key): run check({ transactionId }) with an id of yours',
    };
  }
  if (cause instanceof StatusRateLimitError) {
    return cause.reason === 'blocked'
      ? fail('blocked', `nothing was sent: ${cause.message}`)
      : fail('rate_limited', `nothing was sent: ${cause.message}`);
  }
  if (!(cause instanceof StatusQueryError)) {
    return fail(
      'service_error',
      `the check failed: ${cause instanceof Error ? cause.message : String(cause)}`,
    );
  }
  const { httpStatus, statutCode } = cause;
  const code = statutCode ?? httpStatus;
  if (code === 401 || code === 403 || httpStatus === 401)
    return fail(
      'api_key',
      `the service refused the request (${code}): the apiKey is probably wrong, or blocked` +
        (code === 403 ? '; the client now pauses for blockCooldownMs' : ''),
      httpStatus,
    );
  if (code === 429) return fail('blocked', `the service answered 429: ${cause.message}`, httpStatus);
  if (cause.location !== undefined)
    return fail(
      'base_url',
      `baseUrl redirects (to ${cause.location}): set it to the address that answers`,
      httpStatus,
    );
  if (httpStatus === undefined) return fail('unreachable', `no answer from baseUrl: ${cause.message}`);
  if (httpStatus >= 500 || (statutCode ?? 0) >= 500)
    return fail('service_error', `the service failed: ${cause.message}`, httpStatus);
  if (statutCode === undefined)
    return fail(
      'base_url',
      `what answered at baseUrl is not the status API (HTTP ${httpStatus}, not its JSON envelope): ` +
        'baseUrl should end with /api_v1/transaction',
      httpStatus,
    );
  const said = `${cause.serviceMessage ?? ''}`;
  if (/key|auth|token|credential|unauthori[sz]ed|forbidden/i.test(said))
    return fail('api_key', `the service refused the request: ${said}`, httpStatus);
  return fail(
    'service_error',
    `the service answered an unexpected statut_code: ${cause.message}`,
    httpStatus,
  );
}

/** How many distinct ids in a row, all not found, make the warning. */
export const NOT_FOUND_STREAK = 5;
const WARN_EVERY_MS = 60 * 60_000;

/**
 * Watches the service's answers: when the last {@link NOT_FOUND_STREAK} distinct ids asked were all not
 * found, logs one warning (at most one an hour) naming the likely cause: a wrong API key or base URL, since
 * genuine notifications are then rejected as forged.
 */
export function createNotFoundWatch(logger: Logger, now: () => number) {
  const streak = new Set<string>();
  const throttle = createLogThrottle({ everyMs: WARN_EVERY_MS, now });
  return {
    found(): void {
      streak.clear();
    },
    notFound(id: string): void {
      streak.add(id);
      // Only a full streak is an occurrence: the count is the streak's, not the throttle's.
      if (streak.size < NOT_FOUND_STREAK || throttle.note() === undefined) return;
      logger.warn(
        { notFound: streak.size, transaction_ids: [...streak] },
        `the payment service answered "not found" for the last ${streak.size} transactions asked: if they are ` +
          'genuine, the status client is misconfigured: check apiKey (an id created under another key is not ' +
          'found) and baseUrl; client.check() tells which. Their notifications are rejected as not_found',
      );
      streak.clear();
    },
  };
}
