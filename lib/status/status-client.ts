import { setTimeout as sleep } from 'node:timers/promises';
import {
  messageOf,
  StatusQueryError,
  StatusRateLimitError,
  TransactionNotFoundError,
} from '../shared/errors.js';
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
import { createFoundElsewhereWarning } from './found-elsewhere-warning.js';

/**
 * Several API keys: `{ [account]: key }`, or a function giving the key of an account (then `accounts` names
 * them). The service issues a key per currency zone and answers "not found" to a key that did not create the
 * transaction.
 * @inline
 */
export type ApiKeys = Readonly<Record<string, string>> | ((account: string) => string);

/** The account `apiKey` alone stands for: one key is one account, named so. */
export const DEFAULT_ACCOUNT = 'default';

/**
 * Options of {@link createStatusClient}. `baseUrl` and one of `apiKey` or `apiKeys` are required; each other
 * default is given.
 * @inline
 */
export interface StatusClientOptions {
  /** The service's transaction API, such as `https://host/api_v1/transaction`; queries go to `{baseUrl}/status`. */
  baseUrl: string;
  /**
   * Your API key, sent as `api_key` in the body: one key, the account `'default'`. Give this or `apiKeys`.
   * @default undefined
   */
  apiKey: string | undefined;
  /**
   * Several keys, one per account (the service issues one per currency zone): `{ zoneA: 'k1', zoneB: 'k2' }`,
   * or `(account) => key` with `accounts`. A transaction is queried with its account's key (named at
   * `ipn.expect(id, { account })`, by the router's `accountOf`, or `getStatus(id, { account })`); one whose
   * account is unknown, or not found under the account named (named wrongly: a find elsewhere is warned of),
   * is asked with each (other) key in turn until one finds it, and is "not found" only when every key says
   * so. Each key has its own budget, cool-down and cache. Give this or `apiKey`.
   * @default undefined
   */
  apiKeys: ApiKeys | undefined;
  /**
   * With `apiKeys` as a function: the accounts it gives keys for, in the order they are tried. A map's own
   * names are its accounts.
   * @default undefined
   */
  accounts: readonly string[] | undefined;
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
   * process; with several keys, per key (its `scoped()`). @default none: the guard is this process's own
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
  /** The accounts whose keys the client holds, in the order an id of unknown account is tried. */
  readonly accounts: readonly string[];
  /**
   * A self-test to run at start: asks the status query once, through the guard, about a made-up id (or
   * `transactionId`, one of yours) and says whether `baseUrl` and the key work, and if not, which one is
   * likely wrong; with several keys, `check({ account })` checks that account's key (else each key in turn).
   * Never rejects, but with a `TypeError` for an account the client holds no key for.
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
  options: Partial<StatusClientOptions> & Pick<StatusClientOptions, 'baseUrl'>,
): StatusClient {
  const resolved = resolveStatusOptions(options);
  const { retries, retryDelayMs } = resolved;
  const accounts = accountsOf(resolved);
  const keyOf = keyGetter(resolved);
  const logger = guardLogger(resolved.logger);
  const exchange = { ...resolved, url: `${resolved.baseUrl}/status` };
  // A monotonic clock: a wall-clock step must neither reopen the budget nor end a cool-down early.
  const now = monotonicNow;
  const { shared } = resolved;
  const single = accounts.length === 1;
  // One guard per key, as the service counts: its budget, cool-down, cache of answers and locks.
  const guards = new Map<string, Guard>(
    accounts.map((account) => {
      const fleet = shared && (single ? shared : (shared.scoped as (name: string) => SharedGuard)(account));
      const guard: Guard = fleet
        ? createFleetGuard({ ...resolved, shared: fleet, logger, now, lockMs: lockMsOf(resolved) })
        : createQueryGuard({ ...resolved, now });
      return [account, guard];
    }),
  );
  const guardOf = (account: string): Guard => guards.get(account) as Guard;
  /** The account that last found each id: asked first next time. */
  const owners = new Map<string, string>();

  async function request(account: string, transactionId: string): Promise<StatusRecord> {
    const guard = guardOf(account);
    const apiKey = keyOf(account);
    await guard.permit(transactionId);
    logger.debug({ transaction_id: transactionId, ...(single ? {} : { account }) }, 'status query sent');
    const { httpStatus, retryAfter, body } = await exchangeStatus(transactionId, { ...exchange, apiKey });
    const answer = parseStatusAnswer(transactionId, { httpStatus, body });
    if (answer instanceof StatusQueryError && answer.blocked) {
      // The service's 429 gives the wait in its message: obey the longer of it and Retry-After.
      guard.blocked(Math.max(retryAfterMs(retryAfter), waitFromMessage(body)));
      logger.warn(
        { transaction_id: transactionId, status: httpStatus, ...(single ? {} : { account }) },
        'the payment service may be blocking status queries: sending none during the cool-down',
      );
    }
    if (answer instanceof Error) throw withoutKeyIn(answer, apiKey);
    return answer;
  }

  const watch = createNotFoundWatch(logger, now);
  // Throttled per pair of accounts: a partner naming the wrong one does so for every payment.
  const foundElsewhere = createFoundElsewhereWarning(logger, { now });

  async function withRetries(account: string, transactionId: string): Promise<StatusRecord> {
    for (let attempt = 0; ; attempt += 1) {
      try {
        return await request(account, transactionId);
      } catch (error) {
        if (!(error instanceof StatusQueryError) || !error.retryable || error.blocked || attempt >= retries)
          throw error;
        // Exponential backoff with jitter, so that many clients recovering at once do not ask in step.
        await sleep(retryDelayMs * 2 ** attempt * (0.5 + Math.random() / 2));
      }
    }
  }

  const askOne = (account: string, id: string, since: number | undefined): Promise<StatusRecord> =>
    guardOf(account).ask(id, () => withRetries(account, id), since);

  /**
   * Asks with each key of `order` in turn until one finds it, and remembers that key as the id's. A
   * not-found (`notFound`, if none answers) is the answer only when every key said so: a key that could not
   * tell (its budget spent, a block, an outage) makes the whole "can't tell yet", with its error. `asked` is
   * told of each key asked (not of one its guard refused).
   */
  async function askIn(
    order: readonly string[],
    id: string,
    since: number | undefined,
    asked: Asked,
    notFound?: TransactionNotFoundError,
  ): Promise<{ record: StatusRecord; account: string }> {
    let failure: Error | undefined;
    for (const account of order) {
      try {
        const record = await askOne(account, id, since);
        tell(asked, account);
        if (!single) remember(owners, id, account, resolved.cacheSize);
        return { record, account };
      } catch (error) {
        if (!(error instanceof StatusRateLimitError)) tell(asked, account);
        if (error instanceof TransactionNotFoundError) notFound = error;
        else
          failure ??=
            error instanceof Error
              ? error
              : new StatusQueryError(
                  id,
                  `the status query failed: ${messageOf(error)}`,
                  { retryable: true },
                  {
                    cause: error,
                  },
                );
      }
    }
    if (failure !== undefined) throw failure;
    throw notFound ?? new TransactionNotFoundError(id);
  }

  /** `first`, then the other accounts in their order. */
  const startingWith = (first: string | undefined): readonly string[] =>
    first === undefined ? accounts : [first, ...accounts.filter((a) => a !== first)];

  /** Asks with each key in turn, the one that last found the id first. */
  const askEach = async (id: string, since: number | undefined, asked: Asked): Promise<StatusRecord> =>
    (await askIn(startingWith(owners.get(id)), id, since, asked)).record;

  /**
   * Asks with the named account's key first, always: the key that last found the id (`owners`, learnt from
   * any query, one whose account a forger chose included) never answers in its place. Its not-found is not
   * final: the account may be named wrongly (a partner's mistake, a renamed account, a wrong `accountOf`
   * guess), so each other key is then asked in turn (the one that last found the id first), as for an id of
   * unknown account, and a find under another account is warned of. Any other error of the named key is
   * the answer: keys are asked again only for a not-found.
   */
  async function askNamed(
    id: string,
    account: string,
    since: number | undefined,
    asked: Asked,
  ): Promise<StatusRecord> {
    let found: { record: StatusRecord; account: string };
    try {
      found = await askIn([account], id, since, asked);
    } catch (error) {
      if (!(error instanceof TransactionNotFoundError)) throw error;
      found = await askIn(
        startingWith(owners.get(id)).filter((a) => a !== account),
        id,
        since,
        asked,
        error,
      );
    }
    if (found.account !== account) foundElsewhere(id, account, found.account);
    return found.record;
  }

  /**
   * One id, through the named account's key (only that key when `onlyNamed`, for `check()`), or each key in
   * turn; the not-found watch sees the outcome, `asked` each key asked.
   */
  async function ask(
    id: string,
    account: string | undefined,
    since?: number,
    onlyNamed = false,
    asked?: Asked,
  ): Promise<StatusRecord> {
    try {
      const record = await (account === undefined
        ? askEach(id, since, asked)
        : onlyNamed
          ? askOne(account, id, since)
          : askNamed(id, account, since, asked));
      watch.found();
      return record;
    } catch (error) {
      if (error instanceof TransactionNotFoundError && !id.startsWith(CHECK_PREFIX)) watch.notFound(id);
      throw error;
    }
  }

  const unknownAccount = (where: string, account: unknown): TypeError | undefined =>
    account === undefined || (typeof account === 'string' && guards.has(account))
      ? undefined
      : new TypeError(
          `${where}: unknown account ${JSON.stringify(account) ?? typeof account} (known: ${accounts.join(', ')})`,
        );

  return {
    getStatus(transactionId, options) {
      if (typeof transactionId !== 'string' || transactionId.length === 0) {
        return Promise.reject(new TypeError('getStatus: transactionId must be a non-empty string'));
      }
      const since = typeof options?.since === 'number' ? options.since : undefined;
      const account = options?.account;
      const onQuery = options?.onQuery;
      const asked = typeof onQuery === 'function' ? onQuery : undefined;
      const refused = unknownAccount('getStatus', account);
      return refused ? Promise.reject(refused) : ask(transactionId, account, since, false, asked);
    },
    check: (checkOptions) => {
      const refused = unknownAccount('check', checkOptions?.account);
      if (refused) return Promise.reject(refused);
      return checkStatus((id) => ask(id, checkOptions?.account, undefined, true), checkOptions);
    },
    accounts,
    stats: statsOf(guards),
  };
}

/** Who is told of each key a call asks (`StatusQueryOptions.onQuery`), if anyone. */
type Asked = ((account: string) => void) | undefined;

/** Tells `asked` of `account`; its throw is not the query's business. */
function tell(asked: Asked, account: string): void {
  try {
    asked?.(account);
  } catch {
    // The caller's counting failed: the answer stands.
  }
}

/** Keeps `id`'s owner, the oldest forgotten past `max`. */
function remember(owners: Map<string, string>, id: string, account: string, max: number): void {
  owners.delete(id);
  owners.set(id, account);
  if (owners.size > max) owners.delete(owners.keys().next().value as string);
}

/** The accounts of the resolved options: `apiKey`'s one, a map's names, or `accounts`. */
function accountsOf({ apiKeys, accounts }: StatusClientOptions): readonly string[] {
  if (apiKeys === undefined) return Object.freeze([DEFAULT_ACCOUNT]);
  return Object.freeze([...(typeof apiKeys === 'function' ? (accounts ?? []) : Object.keys(apiKeys))]);
}

/** The key of an account; a function's answer is checked at each query (a missing key is no answer). */
function keyGetter({ apiKey, apiKeys }: StatusClientOptions): (account: string) => string {
  if (apiKeys === undefined) return () => apiKey as string;
  if (typeof apiKeys !== 'function') return (account) => apiKeys[account] as string;
  return (account) => {
    let key: unknown;
    try {
      key = apiKeys(account);
    } catch (cause) {
      throw new StatusQueryError('', `apiKeys(${account}) threw: ${messageOf(cause)}`, { retryable: false });
    }
    if (typeof key !== 'string' || key.length === 0)
      throw new StatusQueryError('', `apiKeys(${account}) gave no key (a non-empty string)`, {
        retryable: false,
      });
    return key;
  };
}

/** What the guards counted, summed; with several keys, each key's own under `accounts`. */
function statsOf(guards: Map<string, Guard>): Readonly<StatusClientStats> {
  const all = [...guards.values()].map((guard) => guard.stats);
  if (all.length === 1) return all[0] as StatusClientStats;
  const sum = (name: 'queries' | 'refused' | 'cached' | 'shared' | 'budgetLeft'): number =>
    all.reduce((total, stats) => total + stats[name], 0);
  const fleet = all.some((stats) => stats.guard !== undefined);
  return {
    get queries() {
      return sum('queries');
    },
    get refused() {
      return sum('refused');
    },
    get cached() {
      return sum('cached');
    },
    get shared() {
      return sum('shared');
    },
    get budgetLeft() {
      return sum('budgetLeft');
    },
    ...(fleet
      ? {
          get guard() {
            return all.some((stats) => stats.guard === 'fallback') ? 'fallback' : 'shared';
          },
          get guardFailures() {
            return all.reduce((total, stats) => total + (stats.guardFailures ?? 0), 0);
          },
        }
      : {}),
    accounts: Object.fromEntries([...guards].map(([account, guard]) => [account, guard.stats])),
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
    apiKey: undefined,
    apiKeys: undefined,
    accounts: undefined,
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
  checkKeys(resolved, fail);
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
  if (shared !== undefined && accountsOf(resolved).length > 1 && typeof shared.scoped !== 'function')
    fail(
      'shared must have scoped(account) with several keys (each key has its own budget), as redisGuard() has',
    );
  return { ...resolved, baseUrl: resolved.baseUrl.replace(/\/+$/, '') };
}

/**
 * `apiKey` (a non-empty string) or `apiKeys` (a non-empty map of non-empty, distinct keys; or a function with
 * `accounts`, a non-empty list of distinct names), never both.
 */
function checkKeys(resolved: StatusClientOptions, fail: (message: string) => never): void {
  const { apiKey, apiKeys, accounts } = resolved;
  if (apiKey !== undefined && apiKeys !== undefined) fail('give apiKey or apiKeys, not both');
  if (apiKeys === undefined) {
    if (accounts !== undefined) fail('accounts goes with apiKeys as a function');
    if (typeof apiKey !== 'string' || apiKey.length === 0)
      fail('apiKey (a non-empty string) or apiKeys ({ [account]: key }) is required');
    return;
  }
  if (typeof apiKeys === 'function') {
    if (!Array.isArray(accounts) || accounts.length === 0)
      fail("apiKeys as a function needs accounts: the names it gives keys for, such as ['zoneA', 'zoneB']");
    const names = accounts as unknown[];
    if (names.some((name) => typeof name !== 'string' || name.length === 0))
      fail('accounts must be non-empty strings');
    if (new Set(names).size !== names.length) fail('accounts must not name an account twice');
    return;
  }
  if (accounts !== undefined)
    fail("accounts goes with apiKeys as a function (a map's names are its accounts)");
  if (typeof apiKeys !== 'object' || apiKeys === null || Array.isArray(apiKeys))
    fail('apiKeys must be { [account]: key } or a function (account) => key');
  const entries = Object.entries(apiKeys);
  if (entries.length === 0) fail('apiKeys must name at least one account');
  for (const [account, key] of entries) {
    if (typeof key !== 'string' || key.length === 0)
      fail(`apiKeys.${account} must be a non-empty string, got ${typeof key}`);
  }
  const keys = entries.map(([, key]) => key);
  if (new Set(keys).size !== keys.length)
    fail('apiKeys names one key under two accounts: the service counts one budget per key, name it once');
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
