import type { IncomingMessage } from 'node:http';
import type { IpnRouter } from '../router/ipn-router.js';
import { defaultLogger, guardLogger, type Logger } from '../observability/logger.js';

/**
 * What the page needs of the router: `ipnRouter()` returns it.
 * @inline
 */
export type AdminSource = Pick<IpnRouter<unknown>, 'inbox' | 'metrics' | 'reconcile' | 'on'>;

/**
 * Options of {@link adminRouter} (`Req` is node's `IncomingMessage`, or Express's request that extends it) and
 * of `adminFetchHandler()` (`Req` is a WHATWG `Request`): `authorize` is given that request.
 * @inline
 */
export interface AdminOptions<Req = IncomingMessage> {
  /** The router whose inbox, metrics and events the page shows: what `ipnRouter()` returned. Required. */
  ipn: AdminSource;
  /**
   * Decides whether a request may see the page and act on it (replay, purge, reconcile): return `true` for
   * your operators, from your own session or login. Every request is asked, pages and actions alike; `false`,
   * a rejection or a throw answers 403. Required: a page that can replay payments is never public by accident.
   * Return `{ actor: name }` instead of `true` to let the operator in and have their actions (replay, purge)
   * kept under that name in the audit trail; after `true` they are kept as `'unknown'`. Anything else (a
   * string, an object without a non-empty `actor`) answers 403, as `false` does: only an explicit yes opens.
   * @example (req) => req.session?.user?.role === 'admin'
   * @example (req) => (req.user?.isAdmin ? { actor: req.user.email } : false)
   */
  authorize: (req: Req) => boolean | { actor: string } | Promise<boolean | { actor: string }>;
  /** Show the customer's number and name (`destination`, `customer_name`) in clear, as the router's option of the same name does for logs. @default false */
  logCustomerData: boolean;
  /** How many recent `rejected` and `error` events the page keeps in memory (for at-most-once mode too). @default 50 */
  recentEvents: number;
  /** Entries per page of the list. @default 50 */
  pageSize: number;
  /** The page's title. @default 'ipn-kit' */
  title: string;
  /**
   * Where the page reports what failed underneath it (the store could not be read, an action threw): a
   * pino-compatible logger, the same as the router's if you like. @default errors to `console.error`
   */
  logger: Logger;
}

/** Every option, so that the compiler refuses a key added to {@link AdminOptions} and forgotten here. */
const OPTION_KEYS: Record<keyof AdminOptions, true> = {
  ipn: true,
  authorize: true,
  logCustomerData: true,
  recentEvents: true,
  pageSize: true,
  title: true,
  logger: true,
};
const KNOWN: ReadonlySet<string> = new Set(Object.keys(OPTION_KEYS));

/**
 * Applies every default and throws a `TypeError` for a programmer error; `name` is the function the messages
 * name (`adminRouter`, `adminFetchHandler`).
 */
export function resolveAdminOptions<Req>(
  given: Partial<AdminOptions<Req>> | undefined,
  name = 'adminRouter',
): AdminOptions<Req> {
  const options = Object.fromEntries(
    Object.entries(given ?? {}).filter(([, value]) => value !== undefined),
  ) as Partial<AdminOptions<Req>>;
  const unknown = Object.keys(options).filter((key) => !KNOWN.has(key));
  if (unknown.length > 0) {
    throw new TypeError(`${name}: unknown option ${unknown.join(', ')} (known: ${[...KNOWN].join(', ')})`);
  }
  const { ipn, authorize } = options;
  if (typeof authorize !== 'function') {
    throw new TypeError(
      `${name}: authorize is required, a function (req) => boolean that lets only your operators in: this page can replay payments`,
    );
  }
  if (typeof ipn !== 'function' && (typeof ipn !== 'object' || ipn === null)) {
    throw new TypeError(`${name}: ipn is required: the router that ipnRouter() returned`);
  }
  for (const method of ['metrics', 'reconcile', 'on'] as const) {
    if (typeof ipn[method] !== 'function') {
      throw new TypeError(`${name}: ipn must be what ipnRouter() returned (it has no ${method}())`);
    }
  }
  const resolved: AdminOptions<Req> = {
    ipn,
    authorize,
    logCustomerData: false,
    recentEvents: 50,
    pageSize: 50,
    title: 'ipn-kit',
    logger: defaultLogger,
    ...options,
  };
  for (const key of ['recentEvents', 'pageSize'] as const) {
    const value = resolved[key];
    if (!Number.isInteger(value) || value < 1 || value > 1000) {
      throw new TypeError(`${name}: ${key} must be a whole number from 1 to 1000, got ${String(value)}`);
    }
  }
  if (typeof resolved.logCustomerData !== 'boolean') {
    throw new TypeError(`${name}: logCustomerData must be a boolean`);
  }
  if (typeof resolved.title !== 'string') throw new TypeError(`${name}: title must be a string`);
  const { logger } = resolved;
  for (const method of ['debug', 'info', 'warn', 'error'] as const) {
    if (typeof logger !== 'object' || logger === null || typeof logger[method] !== 'function') {
      throw new TypeError(`${name}: logger must have a ${method}() method (a pino-compatible logger)`);
    }
  }
  return { ...resolved, logger: guardLogger(logger) };
}
