import { setTimeout as sleep } from 'node:timers/promises';
import { StatusQueryError, TransactionNotFoundError } from '../shared/errors.js';
import { defaultLogger, guardLogger, type Logger } from '../observability/logger.js';
import { createFleetGuard } from './fleet-guard.js';
import { monotonicNow } from '../shared/clock.js';
import { createQueryGuard, type StatusClientStats, type StatusQueryOptions } from './query-guard.js';
import type { SharedGuard } from './shared-guard.js';
import { parseStatusAnswer, type StatusRecord } from './status-envelope.js';
import { exchangeStatus, isLoopback, withoutKey } from './status-request.js';
import {
  checkStatus,
  createNotFoundWatch,
  type StatusCheck,
  type StatusCheckOptions,
} from './status-check.js';
import { waitFromMessage } from './wait-message.js';

/**
 * Options of {@link createStatusClient}. `baseUrl` and `apiKey` are required; each other default is given.
 * @inline
 */
export interface StatusClientOptions {
  /** The service's transaction API, such as `https://host/api_v1/transaction`; queries go to `{baseUrl}/status`. */
  baseUrl: string;
  /** Your API key, sent as `api_key` in the body. */
  apiKey: string;
  /**
   * Most requests sent in any 60 s window, retries included. Over it, calls fail at once with
   * `StatusRateLimitError` (reason `budget`) instead of queueing.
   * @default 30
   */
  maxQueriesPerMinute: number;
  /**
   * How long a non-final answer (such as `PENDING1`) or a not-found answer is reused before that id is asked
   * again, in ms: the service asks for 15 minutes between repeated queries of one transaction.
   * @default 900_000 (15 minutes)
   */
  minIntervalMs: number;
  /**
   * After an answer that looks like a block (HTTP 429 or 403), nothing is sent for this long (or the wait the
   * answer gives, in `Retry-After` or in its message, if longer, up to a day), in ms; calls fail at once with `StatusRateLimitError` (reason `blocked`).
   * @default 900_000 (15 minutes)
   */
  blockCooldownMs: number;
  /** Time limit of each request, answer body included (a body that dribbles in counts), in ms. @default 10_000 */
  timeoutMs: number;
  /**
   * Largest answer read, in bytes: past it the connection is dropped and the call fails with
   * `StatusQueryError` (a real envelope is well under 2 KB). @default 65_536
   */
  maxResponseBytes: number;
  /**
   * Accept an `http:` `baseUrl` to a host other than loopback. Off, `baseUrl` must be `https:` (or `http:` to
   * 127.0.0.1, ::1 or localhost): the API key travels in the body, readable by anyone on the way.
   * @default false
   */
  allowInsecureHttp: boolean;
  /** Extra attempts after a network error, a timeout or a 5xx answer (never after any other answer). @default 2 */
  retries: number;
  /** Base of the exponential backoff between attempts, in ms; each wait is jittered. @default 500 */
  retryDelayMs: number;
  /** Most ids whose answers are cached. @default 10_000 */
  cacheSize: number;
  /** The fetch to use. @default globalThis.fetch */
  fetch: typeof fetch;
  /** A pino-compatible logger. @default errors to `console.error`, the rest quiet */
  logger: Logger;
  /**
   * A guard shared by every instance of your app (`redisGuard({ client })` from `ipn-kit/redis`): then the
   * budget, the cool-down, the answers and the one-request-per-id rule hold for the whole fleet, not per
   * process. @default none: the guard is this process's own
   */
  shared: SharedGuard | undefined;
}

/** A status client: `getStatus` through the guard, and what the guard counted. */
export interface StatusClient {
  /**
   * The current record of one transaction, any state (`SUCCESSFUL`, `FAILED`, or a non-final one such as
   * `PENDING1`). Rejects with `TransactionNotFoundError`, `StatusQueryError` or `StatusRateLimitError`
   * (all `StatusError`s).
   */
  getStatus(transactionId: string, options?: StatusQueryOptions): Promise<StatusRecord>;
  /**
   * A self-test to run at start: asks the status query once, through the guard, about a made-up id (or
   * `transactionId`, one of yours) and says whether `baseUrl` and the key work, and if not, which one is
   * likely wrong. Never rejects.
   * @example
   * const check = await client.check();
   * if (!check.ok) logger.error(check, `status client misconfigured: ${check.message}`);
   */
  check(options?: StatusCheckOptions): Promise<StatusCheck>;
  /** Requests sent, calls refused, answered from cache, or shared with a request in flight. */
  readonly stats: Readonly<StatusClientStats>;
}

/**
 * A client for the status query that can never get its caller blocked: concurrent calls for one id share
 * one request, final answers are cached, other answers are reused for `minIntervalMs`, a budget of
 * `maxQueriesPerMinute` is never exceeded, and after a 429 or 403 nothing is sent during a cool-down. It
 * never polls by itself.
 *
 * @example
 * import { createStatusClient } from 'ipn-kit';
 *
 * const client = createStatusClient({ baseUrl: 'https://api.example.com/api_v1/transaction', apiKey });
 * const record = await client.getStatus('PIX_22827809');
 * if (record.state === 'SUCCESSFUL') markPaid(record.custom_data);
 */
export function createStatusClient(
  options: Partial<StatusClientOptions> & Pick<StatusClientOptions, 'baseUrl' | 'apiKey'>,
): StatusClient {
  const resolved = resolveStatusOptions(options);
  const { apiKey, retries, retryDelayMs } = resolved;
  const logger = guardLogger(resolved.logger);
  const exchange = { ...resolved, url: `${resolved.baseUrl}/status` };
  // A monotonic clock: a wall-clock step must neither reopen the budget nor end a cool-down early.
  const now = monotonicNow;
  const { shared } = resolved;
  const guard: Guard = shared
    ? createFleetGuard({ ...resolved, shared, logger, now, lockMs: lockMsOf(resolved) })
    : createQueryGuard({ ...resolved, now });

  async function request(transactionId: string): Promise<StatusRecord> {
    await guard.permit(transactionId);
    logger.debug({ transaction_id: transactionId }, 'status query sent');
    const { httpStatus, retryAfter, body } = await exchangeStatus(transactionId, exchange);
    const answer = parseStatusAnswer(transactionId, { httpStatus, body });
    if (answer instanceof TransactionNotFoundError) {
      if (!transactionId.startsWith(CHECK_PREFIX)) watch.notFound(transactionId);
    } else if (!(answer instanceof Error)) watch.found();
    if (answer instanceof StatusQueryError && answer.blocked) {
      // The service's 429 gives the wait in its message: obey the longer of it and Retry-After.
      guard.blocked(Math.max(retryAfterMs(retryAfter), waitFromMessage(body)));
      logger.warn(
        { transaction_id: transactionId, status: httpStatus },
        'the payment service may be blocking status queries: sending none during the cool-down',
      );
    }
    if (answer instanceof Error) throw withoutKeyIn(answer, apiKey);
    return answer;
  }

  const watch = createNotFoundWatch(logger, now);

  async function withRetries(transactionId: string): Promise<StatusRecord> {
    for (let attempt = 0; ; attempt += 1) {
      try {
        return await request(transactionId);
      } catch (error) {
        if (!(error instanceof StatusQueryError) || !error.retryable || error.blocked || attempt >= retries)
          throw error;
        // Exponential backoff with jitter, so that many clients recovering at once do not ask in step.
        await sleep(retryDelayMs * 2 ** attempt * (0.5 + Math.random() / 2));
      }
    }
  }

  return {
    getStatus(transactionId, options) {
      if (typeof transactionId !== 'string' || transactionId.length === 0) {
        return Promise.reject(new TypeError('getStatus: transactionId must be a non-empty string'));
      }
      const since = typeof options?.since === 'number' ? options.since : undefined;
      return guard.ask(transactionId, () => withRetries(transactionId), since);
    },
    check: (options) => checkStatus((id) => guard.ask(id, () => withRetries(id)), options),
    stats: guard.stats,
  };
}

/** The made-up ids `check()` asks about start so: they are not counted as notifications not found. */
const CHECK_PREFIX = 'IPNKIT.CHECK';

/** What the client asks of its guard: this process's own, or the fleet's (whose permit asks Redis). */
interface Guard {
  readonly stats: StatusClientStats;
  ask(id: string, query: () => Promise<StatusRecord>, since?: number): Promise<StatusRecord>;
  permit(id: string): void | Promise<void>;
  blocked(retryAfterMs?: number): void;
}

/** How long one request of an id may take, retries and their backoff included: how long its lock holds. */
function lockMsOf({ timeoutMs, retries, retryDelayMs }: StatusClientOptions): number {
  return timeoutMs * (retries + 1) + retryDelayMs * 2 ** retries + 1_000;
}

/** Longest `Retry-After` obeyed: a larger one (or a typo) must not silence the client for weeks. */
const MAX_RETRY_AFTER = 24 * 60 * 60_000;

/** `Retry-After` as seconds or an HTTP date, in ms (at most a day); 0 when absent or unreadable. */
function retryAfterMs(header: string | null): number {
  if (header === null) return 0;
  const seconds = Number(header);
  const date = Date.parse(header);
  const ms = Number.isFinite(seconds) ? seconds * 1000 : Number.isNaN(date) ? 0 : date - Date.now();
  return Math.min(Math.max(0, ms), MAX_RETRY_AFTER);
}

/**
 * Every option with its default: the one declaration the known keys are derived from (typed as the whole
 * interface, so the compiler refuses a missing or an extra key). Built per call, so that the `fetch` default
 * is the `globalThis.fetch` of that moment, not of the import.
 */
function statusDefaults(): StatusClientOptions {
  return {
    baseUrl: '',
    apiKey: '',
    maxQueriesPerMinute: 30,
    minIntervalMs: 15 * 60_000,
    blockCooldownMs: 15 * 60_000,
    timeoutMs: 10_000,
    maxResponseBytes: 65_536,
    allowInsecureHttp: false,
    retries: 2,
    retryDelayMs: 500,
    cacheSize: 10_000,
    fetch: globalThis.fetch,
    logger: defaultLogger,
    shared: undefined,
  };
}

function resolveStatusOptions(options: Partial<StatusClientOptions>): StatusClientOptions {
  const given = Object.fromEntries(Object.entries(options ?? {}).filter(([, value]) => value !== undefined));
  const defaults = statusDefaults();
  const resolved: StatusClientOptions = { ...defaults, ...given };
  const fail = (message: string): never => {
    throw new TypeError(`createStatusClient: ${message}`);
  };
  // Own keys only: `in` would take `constructor` or `toString` for options.
  const unknown = Object.keys(given).filter((key) => !Object.hasOwn(defaults, key));
  if (unknown.length > 0)
    fail(`unknown option ${unknown.join(', ')} (known: ${Object.keys(defaults).join(', ')})`);
  checkBaseUrl(resolved.baseUrl, resolved.allowInsecureHttp === true, fail);
  if (typeof resolved.apiKey !== 'string' || resolved.apiKey.length === 0)
    fail('apiKey must be a non-empty string');
  for (const name of ['maxQueriesPerMinute', 'cacheSize', 'maxResponseBytes'] as const) {
    if (!Number.isInteger(resolved[name]) || resolved[name] < 1)
      fail(`${name} must be a positive integer, got ${String(resolved[name])}`);
  }
  for (const name of ['minIntervalMs', 'blockCooldownMs', 'timeoutMs', 'retryDelayMs', 'retries'] as const) {
    const value = resolved[name];
    if (
      typeof value !== 'number' ||
      !Number.isFinite(value) ||
      value < 0 ||
      (name === 'timeoutMs' && value === 0)
    )
      fail(
        `${name} must be a ${name === 'timeoutMs' ? 'positive' : 'non-negative'} number, got ${String(value)}`,
      );
  }
  if (!Number.isInteger(resolved.retries)) fail(`retries must be an integer, got ${resolved.retries}`);
  if (typeof resolved.fetch !== 'function') fail('fetch must be a function (Node 18+ has one built in)');
  const { shared } = resolved;
  if (
    shared !== undefined &&
    ['take', 'block', 'read', 'write', 'lock', 'unlock'].some(
      (m) => typeof Reflect.get(Object(shared), m) !== 'function',
    )
  )
    fail('shared must be a shared guard, such as redisGuard({ client }) from ipn-kit/redis');
  return { ...resolved, baseUrl: resolved.baseUrl.replace(/\/+$/, '') };
}

/** `baseUrl` must be absolute, and `https:` unless the host is loopback or `allowInsecureHttp` is on. */
function checkBaseUrl(baseUrl: unknown, allowInsecureHttp: boolean, fail: (message: string) => never): void {
  const example = 'such as https://host/api_v1/transaction';
  let url: URL | undefined;
  try {
    url = typeof baseUrl === 'string' ? new URL(baseUrl) : undefined;
  } catch {
    url = undefined;
  }
  if (url === undefined || (url.protocol !== 'https:' && url.protocol !== 'http:'))
    fail(`baseUrl must be an absolute https: URL ${example}, got ${String(baseUrl)}`);
  else if (url.protocol === 'http:' && !isLoopback(url.hostname) && !allowInsecureHttp)
    fail(
      `baseUrl must be an https: URL ${example}, got ${url.origin}: the API key travels in the body, ` +
        'readable on the way over http: (accepted only for a loopback host, or with allowInsecureHttp: true)',
    );
}

/** A status error whose text (a message the service echoed) holds the API key, with the key replaced. */
function withoutKeyIn<E extends Error>(error: E, apiKey: string): E {
  if (!(error instanceof StatusQueryError)) return error;
  const texts = [error.message, error.serviceMessage ?? '', error.location ?? ''];
  if (!texts.some((text) => text.includes(apiKey))) return error;
  return new StatusQueryError(error.transactionId, withoutKey(error.message, apiKey), {
    httpStatus: error.httpStatus,
    statutCode: error.statutCode,
    serviceMessage: error.serviceMessage && withoutKey(error.serviceMessage, apiKey),
    location: error.location && withoutKey(error.location, apiKey),
    retryable: error.retryable,
    blocked: error.blocked,
  }) as Error as E;
}
