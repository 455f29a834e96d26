import type { StandardSchemaV1 } from '../notification/standard-schema.js';
import type { Logger } from '../observability/logger.js';
import { defaultLogger } from '../observability/logger.js';
import { MemoryStore } from '../stores/memory/memory-store.js';
import type { DurableStore, Store } from '../stores/store.js';
import type { StatusSource } from '../status/verify-notification.js';
import type { IpnNotification } from '../notification/schema.js';
import type { Authenticate } from '../authenticate/authenticate.js';
import {
  checkDuration,
  checkMethods,
  checkSchema,
  checkSecret,
  MAX_TIMER,
  parseLimit,
} from './option-checks.js';
import { applyRenames, warnRenamed, type Renames } from './renamed-options.js';
import type { AlertOptions } from '../observability/alert-event.js';
import { checkAlertOptions } from './alert-option-checks.js';
import {
  checkRetentionOptions,
  DEFAULT_TTL_MS,
  RETENTION_DEFAULTS,
  type RetentionOptions,
} from './retention-options.js';

/**
 * What `ipnRouter({ unexpected })` does with a notification no expectation is kept for, once expectations
 * are in use.
 * @inline
 */
export type UnexpectedPolicy = 'verify' | 'reject' | 'accept';

/** Options of `ipnRouter()`. Every field is optional; each one's default is given below. */
export interface Options<S extends StandardSchemaV1 | undefined = undefined> {
  /**
   * A schema for your `custom_data`: any synchronous Standard Schema (https://standardschema.dev): zod 4
   * (`zod` or `zod/mini`), zod 3.24+, valibot, arktype, ... When given, every notification carries
   * `customData`, typed as the schema's output: the JSON in `custom_data` (or the raw string, when it is not
   * JSON) parsed by this schema. When it does not match, the payment is still emitted, with `customDataError`
   * instead.
   * @default undefined (no parsing: use `custom_data`, the string as received)
   */
  customData: S;
  /** Where handled notifications are remembered, so resends are dropped. @default new MemoryStore() */
  store: Store;
  /**
   * How long a handled notification is remembered, in milliseconds. Must outlive the service's resends.
   * At least once, delivered inbox entries older than this are deleted by a recovery pass (at most once an
   * hour per instance); undelivered ones are kept, dead ones for `retention.deadMs`.
   * @default 604_800_000 (7 days)
   */
  ttlMs: number;
  /**
   * Largest accepted body (after decompression): a number of bytes, or a string such as `'100kb'` or `'1mb'`.
   * A larger body is answered 413.
   * @default '100kb'
   */
  limit: number | string;
  /**
   * How long to wait for the store (`init` and `claim` together) before answering 503, so the service resends,
   * in milliseconds. A claim that lands later is delivered then, and the resend is a duplicate. At-least-once,
   * it also bounds each inbox call of delivery and recovery (a timeout is reported, and the entry taken up
   * again); `ipn.close()` waits for the store's `close()` at most this long.
   * @default 5_000
   */
  storeTimeoutMs: number;
  /** A pino-compatible logger (`debug`, `info`, `warn`, `error`). @default errors to `console.error`, the rest quiet */
  logger: Logger;
  /**
   * Whether log lines may show the customer's number (`destination`) and name in clear. Off, they are
   * replaced by `[redacted]` wherever they appear, error messages of your listeners included.
   * @default false
   */
  logCustomerData: boolean;
  /**
   * A status client (`createStatusClient()`): every notification is confirmed with the service before it is
   * emitted (state, amount and `custom_data` must match); one that does not match emits `rejected`. Also the
   * client `ipn.reconcile()` uses.
   * @default undefined (notifications are believed as posted)
   */
  verify: StatusSource | undefined;
  /**
   * A status client for the reconciliation sweep and `ipn.reconcile()`, without verifying every notification
   * (the service asks that the status query be used only for notifications that never arrived). When not
   * given, the `verify` client is used for them.
   * @default undefined (the `verify` client, if any)
   */
  statusClient: StatusSource | undefined;
  /**
   * With several API keys (`createStatusClient({ apiKeys })`): the account whose key created a notified
   * transaction, from the notification (its `service_id`, say), for the status query of a notification with
   * no expectation naming one (`ipn.expect(id, { account })`: it wins). `undefined`, a throw or an account the
   * client holds no key for (both warned of): each key is asked in turn until one finds it. A guess the
   * service answers not found is not final either: the other keys are then asked (see `apiKeys`).
   * @default undefined (the expectation's account, else each key in turn)
   */
  accountOf: ((notification: IpnNotification) => string | undefined) | undefined;
  /**
   * How long after `ipn.expect()` an expected transaction with no final notification is reconciled through
   * the status client, in ms. Later queries of one transaction are at least this far apart, and never
   * closer than 15 minutes (the service's rule).
   * @default 900_000 (15 minutes)
   */
  reconcileAfterMs: number;
  /**
   * How many status queries the sweep makes for one expected transaction (a non-final or unknown answer, a
   * failure) before it reports it with a `stale` event and forgets it. A transaction found `FAILED` (by its
   * notification or by a query) keeps its expectation, so that a forged `SUCCESSFUL` is still checked
   * against it: it is asked about up to this bound too, then forgotten without `stale`.
   * @default 8
   */
  reconcileAttempts: number;
  /**
   * What becomes of a notification whose `transaction_id` has no expectation, once expectations are in use
   * (a shared store holds the mark the first `ipn.expect()` leaves, or this process called it): the same on
   * every instance over one store.
   *
   * - `'verify'`: with `verify`, verified as every notification is; with only a `statusClient`, one status
   *   query (within the client's budget and its 15 minutes per transaction) before the answer, and emitted
   *   only if the service's record matches in state, amount and `custom_data`; without either, or when that
   *   query cannot confirm it (not found, a difference, not final, over budget, unreachable), as `'reject'`.
   * - `'reject'`: no status query. Emits `rejected` (reason `unexpected`) and keeps it: with `delivery:
   *   'at-least-once'`, in the inbox as `failed` and never due, with `lastError` starting `unexpected:`
   *   (answered 200: listed by the operator's page and `ipn-kit inbox`, delivered by a `replay` of its key
   *   after checking, never by `replayDead`); at most once, nothing is stored and it is answered 503, so that
   *   the service keeps resending it (`ipn.expect()` it after checking, and the next resend is credited).
   * - `'accept'`: emitted as any other notification, as every version before this option did.
   * @default 'verify'
   */
  unexpected: UnexpectedPolicy;
  /**
   * How often the sweep looks for expected transactions that are due, in ms (one instance at a time when the
   * store is shared). Only due ones are queried, within the status client's budget.
   * @default 60_000
   */
  sweepIntervalMs: number;
  /**
   * How many times a verification that cannot be made now (service unreachable, budget spent, state not final
   * yet) is tried in all before giving up: an `error` event (or `rejected`, reason `not_final`). With
   * `delivery: 'at-least-once'`, `maxAttempts` applies instead.
   * @default 6
   */
  verifyAttempts: number;
  /**
   * How long one status query of `verify` may take, in ms, before that verification counts as one that
   * could not be made now (retried, then reported): a custom source that never settles must not hold a
   * notification forever. Keep it above the client's own worst case (`createStatusClient()`: `timeoutMs`
   * times `retries + 1`, plus its backoff: about 33 s by default).
   * @default 60_000
   */
  verifyTimeoutMs: number;
  /** Wait before the first verification retry, in ms; it doubles each time, up to 10 minutes. @default 10_000 */
  verifyRetryDelayMs: number;
  /**
   * At-most-once with `verify`: most notifications being verified at once. Past it, a new notification is
   * answered 503 with `Retry-After` before its key is claimed (the service resends it later; a forger's flood
   * is dropped), with an `error` event (`VerificationBusyError`). Bounds memory: about this many times your
   * `limit`, at worst.
   * @default 500
   */
  maxPendingVerifications: number;
  /**
   * A secret the IPN address must carry as its `token` query parameter (build the address with `ipnUrl()`);
   * several, during a rotation. A request without it, or with another, is answered 401.
   * @default undefined (no token required)
   */
  secret: string | readonly string[] | undefined;
  /**
   * Proves each notification's origin before it is accepted: a function of the raw body, the headers and the
   * record, such as `hmacAuthenticator({ secret, header: 'x-signature' })` for the signature the service may
   * send. A notification that fails it is answered 401 (an `invalid` event, reason `unauthorized`), with an
   * error log line at most once a minute. A function that throws is answered 500 (an `error` event).
   * @default undefined (no signature checked)
   */
  authenticate: Authenticate | undefined;
  /**
   * Says that a router with no `secret`, no `authenticate`, no `verify` and no expectations in use is
   * unprotected on purpose (a test, a local demo), and silences the warning such a router logs at its first
   * request ("anyone who learns its address can POST a SUCCESSFUL notification"). Expectations are in use
   * with a `statusClient` (and a store that keeps expectations), or once this process called `ipn.expect()`
   * before that first request. It changes nothing else: never set it in production.
   * @default false (the warning is logged once, at the first request of an unprotected router)
   */
  acknowledgeUnprotected: boolean;
  /**
   * `'at-most-once'`: the 200 is sent once the notification is claimed; listeners run after it and a failure
   * is only reported. `'at-least-once'` (needs a store with an inbox: `PostgresStore`, durable; `RedisStore`,
   * as durable as Redis's persistence; or `MemoryStore`, in this process only): the notification is stored
   * before the 200, listeners are awaited, and failed deliveries are retried, then marked dead.
   * @default 'at-most-once'
   */
  delivery: 'at-most-once' | 'at-least-once';
  /** At-least-once: delivery attempts before a notification is marked dead and emitted as `dead`. @default 8 */
  maxAttempts: number;
  /** At-least-once: wait before the second attempt, in ms; it doubles each time, up to 1 hour. @default 30_000 */
  retryDelayMs: number;
  /**
   * At-least-once: how long one attempt may hold a notification, in ms. Listeners that have not settled by
   * then count as failed, and another instance may take it up. Keep it above your listeners' longest run.
   * @default 60_000
   */
  leaseMs: number;
  /** At-least-once: how often notifications left undelivered (a crash, a retry that is due) are taken up, in ms. @default 15_000 */
  recoveryIntervalMs: number;
  /**
   * At-least-once: how many entries a bulk replay (`ipn.replay()`, `replayDead()`, the CLI's and the
   * operator's page's) makes due per second, by the store's clock, so that a thousand dead entries do not
   * reach your listeners (and your database) at once. A positive integer. @default 20
   */
  replayRate: number;
  /**
   * The thresholds of the `alert` event, each optional (each one's default is given with it): a
   * first `dead` entry, or `failuresInARow` (10) failed attempts in a row, fire at once; a recovery resolves
   * at the next success. Nothing is measured while no `alert` listener is added.
   * @default { failuresInARow: 10, failureRatio: 0.5, failureRatioMinAttempts: 20, failureWindowMs: 300_000, backlogAgeMs: 300_000, forgedBurst: 5, forgedWindowMs: 60_000, quietMs: 300_000 }
   */
  alerts: Partial<AlertOptions>;
  /**
   * At least once, how long the inbox keeps what it no longer delivers; delivered entries are kept `ttlMs`.
   * The same pass as `ttlMs`'s (a recovery pass or a drain, at most once an hour per instance) deletes dead
   * entries older than `deadMs` and blanks the customer's name and number older than `personalDataMs`.
   * @default { deadMs: Infinity (kept), personalDataMs: 2_592_000_000 (30 days) }
   */
  retention: Partial<RetentionOptions>;
  /**
   * Who runs the router's periodic work on the store: the inbox's recovery (at-least-once), the retry of a
   * failed attempt, the expectations' sweep, the purge of delivered entries older than `ttlMs`.
   * - `'timers'`: the router's own timers, from its first use (a recovery pass every `recoveryIntervalMs`,
   *   a sweep every `sweepIntervalMs`).
   * - `'drain'`: no timer of the router's ever touches the store: an idle instance makes no query at all,
   *   so a scale-to-zero database (Neon, Supabase's paused projects) can suspend. Everything above waits
   *   for your scheduler (a cron) to call `ipn.drain()`, which must then run often enough: a failed
   *   attempt's retry, a crashed instance's notifications and due expectations wait for the next call.
   *   Requests are served as usual.
   * @default 'timers'
   */
  backgroundWork: 'timers' | 'drain';
  /** @deprecated Renamed `ttlMs` (the same milliseconds); `ttl` is accepted until the next minor version. */
  ttl?: number;
  /** @deprecated Renamed `storeTimeoutMs` (the same milliseconds); `storeTimeout` is accepted until the next minor version. */
  storeTimeout?: number;
  /** @deprecated Renamed `verifyTimeoutMs` (the same milliseconds); `verifyTimeout` is accepted until the next minor version. */
  verifyTimeout?: number;
}

/** The deprecated names `Options` still accepts, each with the option that replaced it. */
const RENAMED = {
  ttl: 'ttlMs',
  storeTimeout: 'storeTimeoutMs',
  verifyTimeout: 'verifyTimeoutMs',
} as const satisfies Renames<string, keyof Options>;

/** An option's deprecated name. */
type RenamedOption = keyof typeof RENAMED;

/** Options with every default applied and checked, as the router uses them: new names only. */
export interface ResolvedOptions<S extends StandardSchemaV1 | undefined = undefined> extends Omit<
  Options<S>,
  'limit' | 'alerts' | 'retention' | RenamedOption
> {
  /** How long the inbox keeps dead entries and the customer's data, every default applied. */
  retention: RetentionOptions;
  /** The body limit in bytes. */
  limit: number;
  /** The alert thresholds, every default applied. */
  alerts: AlertOptions;
}

/** Every current option, required: what {@link DEFAULTS} must hold a value for. */
type Current = { [K in Exclude<keyof Options, RenamedOption>]-?: Options[K] };

/**
 * The one list of the options and their defaults: the compiler refuses a missing or an extra key, and the
 * known keys are derived from it. The store is made per router (a shared default `MemoryStore` would dedupe
 * across routers), so it is `undefined` here.
 */
const DEFAULTS: {
  readonly [K in keyof Current]: K extends 'store'
    ? undefined
    : K extends 'alerts'
      ? AlertOptions
      : K extends 'retention'
        ? RetentionOptions
        : Current[K];
} = {
  customData: undefined,
  store: undefined,
  ttlMs: DEFAULT_TTL_MS,
  limit: '100kb',
  storeTimeoutMs: 5_000,
  logger: defaultLogger,
  logCustomerData: false,
  verify: undefined,
  statusClient: undefined,
  accountOf: undefined,
  reconcileAfterMs: 15 * 60_000,
  reconcileAttempts: 8,
  unexpected: 'verify',
  sweepIntervalMs: 60_000,
  verifyAttempts: 6,
  verifyTimeoutMs: 60_000,
  verifyRetryDelayMs: 10_000,
  maxPendingVerifications: 500,
  secret: undefined,
  authenticate: undefined,
  acknowledgeUnprotected: false,
  delivery: 'at-most-once',
  maxAttempts: 8,
  retryDelayMs: 30_000,
  leaseMs: 60_000,
  recoveryIntervalMs: 15_000,
  retention: RETENTION_DEFAULTS,
  replayRate: 20,
  alerts: {
    failuresInARow: 10,
    failureRatio: 0.5,
    failureRatioMinAttempts: 20,
    failureWindowMs: 5 * 60_000,
    backlogAgeMs: 5 * 60_000,
    forgedBurst: 5,
    forgedWindowMs: 60_000,
    quietMs: 5 * 60_000,
  },
  backgroundWork: 'timers',
};

/** What an at-least-once store must do beyond dedupe. */
const DURABLE_METHODS = ['claim', 'release', 'receive', 'replace', 'lease', 'settle', 'list', 'get'];

/** The keys accepted: the current ones, and the deprecated names (listed in no error message). */
const KNOWN: ReadonlySet<string> = new Set([...Object.keys(DEFAULTS), ...Object.keys(RENAMED)]);

/**
 * Applies every default in one place and throws a `TypeError` for a programmer error. A deprecated name is
 * mapped to its new one, with a warning through the logger once per process.
 */
export function resolveOptions<S extends StandardSchemaV1 | undefined>(
  options: Partial<Options<S>> = {},
): ResolvedOptions<S> {
  const defined = Object.fromEntries(Object.entries(options).filter(([, value]) => value !== undefined));
  const unknown = Object.keys(defined).filter((key) => !KNOWN.has(key));
  if (unknown.length > 0) {
    const known = Object.keys(DEFAULTS).join(', ');
    throw new TypeError(`ipnRouter: unknown option ${unknown.join(', ')} (known: ${known})`);
  }
  const { options: given, used } = applyRenames('ipnRouter', defined, RENAMED);
  // An error names the option as it was written, old name or new.
  const spelled = new Map<string, string>(used.map(([old, current]) => [current, old]));
  const named = (name: string): string => spelled.get(name) ?? name;
  const resolved = {
    ...DEFAULTS,
    customData: undefined as S,
    store: new MemoryStore(),
    ...(given as Partial<ResolvedOptions<S>>),
    limit: parseLimit(given.limit ?? DEFAULTS.limit),
    alerts: checkAlertOptions(DEFAULTS.alerts, given.alerts),
    retention: checkRetentionOptions(given.retention),
  };
  checkSchema(resolved.customData);
  checkMethods('store', resolved.store, ['claim', 'release'], ['init', 'close']);
  checkMethods('logger', resolved.logger, ['debug', 'info', 'warn', 'error'], []);
  // A store keeps it as a whole number of milliseconds (Redis's PX: a 64-bit integer); past this one,
  // Number.MAX_VALUE meant as "forever", Redis refused every claim and every notification got 503.
  checkDuration(named('ttlMs'), resolved.ttlMs, Number.MAX_SAFE_INTEGER);
  // Node fires a longer timer after 1 ms: a timeout that long would fire at once.
  for (const name of [
    'storeTimeoutMs',
    'verifyTimeoutMs',
    'verifyRetryDelayMs',
    'retryDelayMs',
    'leaseMs',
    'recoveryIntervalMs',
    'sweepIntervalMs',
  ] as const)
    checkDuration(named(name), resolved[name], MAX_TIMER);
  checkDuration('reconcileAfterMs', resolved.reconcileAfterMs);
  for (const name of [
    'verifyAttempts',
    'maxAttempts',
    'maxPendingVerifications',
    'reconcileAttempts',
    'replayRate',
  ] as const) {
    if (!Number.isInteger(resolved[name]) || resolved[name] < 1)
      throw new TypeError(`ipnRouter: ${name} must be a positive integer, got ${String(resolved[name])}`);
  }
  if (resolved.verify !== undefined) checkMethods('verify', resolved.verify, ['getStatus'], []);
  if (resolved.statusClient !== undefined)
    checkMethods('statusClient', resolved.statusClient, ['getStatus'], []);
  if (resolved.accountOf !== undefined && typeof resolved.accountOf !== 'function')
    throw new TypeError(
      `ipnRouter: accountOf must be a function of the notification, got ${typeof resolved.accountOf}`,
    );
  if (!['verify', 'reject', 'accept'].includes(resolved.unexpected))
    throw new TypeError(
      `ipnRouter: unexpected must be 'verify', 'reject' or 'accept', got ${String(resolved.unexpected)}`,
    );
  checkSecret(resolved.secret);
  if (resolved.authenticate !== undefined && typeof resolved.authenticate !== 'function')
    throw new TypeError(
      "ipnRouter: authenticate must be a function of { rawBody, body, headers, record }, such as hmacAuthenticator({ secret, header: 'x-signature' })",
    );
  if (resolved.backgroundWork !== 'timers' && resolved.backgroundWork !== 'drain') {
    throw new TypeError(
      `ipnRouter: backgroundWork must be 'timers' or 'drain', got ${String(resolved.backgroundWork)}`,
    );
  }
  if (typeof resolved.acknowledgeUnprotected !== 'boolean')
    throw new TypeError(
      `ipnRouter: acknowledgeUnprotected must be true or false, got ${String(resolved.acknowledgeUnprotected)}`,
    );
  if (resolved.delivery !== 'at-most-once' && resolved.delivery !== 'at-least-once') {
    throw new TypeError(
      `ipnRouter: delivery must be 'at-most-once' or 'at-least-once', got ${String(resolved.delivery)}`,
    );
  }
  if (resolved.delivery === 'at-least-once' && (resolved.store as Partial<DurableStore>).durable !== true) {
    throw new TypeError(
      "ipnRouter: delivery 'at-least-once' needs a durable store that keeps the notification, such as " +
        "new PostgresStore({ pool }) from 'ipn-kit/postgres'; this store only dedupes",
    );
  }
  // A durable store without one of these would fail at the first delivery, or the first forgery, instead.
  if (resolved.delivery === 'at-least-once') checkMethods('store', resolved.store, DURABLE_METHODS, []);
  // Once every check has passed: a construction refused says what to fix and does not spend the warning,
  // which is once per process, on a router that never runs.
  if (used.length > 0) warnRenamed('ipnRouter', used, resolved.logger);
  return resolved;
}
