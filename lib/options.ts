import type { z } from 'zod';
import type { Logger } from './logger.js';
import { defaultLogger } from './logger.js';
import { MemoryStore } from './memory-store.js';
import type { Store } from './store.js';

/** Options of `ipnRouter()`. Every field is optional; each one's default is given below. */
export interface Options<S extends z.core.$ZodType | undefined = undefined> {
  /**
   * A zod 4 schema (from `zod` or `zod/mini`) for your `custom_data`. When given, every notification carries `customData`: the JSON in
   * `custom_data` (or the raw string, when it is not JSON) parsed by this schema. When it does not match, the
   * payment is still emitted, with `customDataError` instead.
   * @default undefined (no parsing: use `custom_data`, the string as received)
   */
  customData: S;
  /** Where handled notifications are remembered, so resends are dropped. @default new MemoryStore() */
  store: Store;
  /**
   * How long a handled notification is remembered, in milliseconds. Must outlive the service's resends.
   * @default 604_800_000 (7 days)
   */
  ttl: number;
  /**
   * Largest accepted body (after decompression): a number of bytes, or a string such as `'100kb'` or `'1mb'`.
   * A larger body is answered 413.
   * @default '100kb'
   */
  limit: number | string;
  /**
   * How long to wait for the store (`init` and `claim` together) before answering 503, so the service resends,
   * in milliseconds. A claim that lands later is delivered then, and the resend is a duplicate.
   * @default 5_000
   */
  storeTimeout: number;
  /** A pino-compatible logger (`debug`, `info`, `warn`, `error`). @default errors to `console.error`, the rest quiet */
  logger: Logger;
}

/** Options with every default applied and checked, as the router uses them. */
export interface ResolvedOptions<S extends z.core.$ZodType | undefined = undefined> extends Omit<
  Options<S>,
  'limit'
> {
  /** The body limit in bytes. */
  limit: number;
}

const UNITS: Record<string, number> = { b: 1, kb: 1024, mb: 1024 ** 2, gb: 1024 ** 3 };

/** Applies every default in one place and throws a `TypeError` for a programmer error. */
export function resolveOptions<S extends z.core.$ZodType | undefined>(
  options: Partial<Options<S>> = {},
): ResolvedOptions<S> {
  const given = Object.fromEntries(Object.entries(options).filter(([, value]) => value !== undefined));
  const unknown = Object.keys(given).filter((key) => !KNOWN.has(key));
  if (unknown.length > 0) {
    throw new TypeError(`ipnRouter: unknown option ${unknown.join(', ')} (known: ${[...KNOWN].join(', ')})`);
  }
  const resolved = {
    customData: undefined as S,
    store: new MemoryStore(),
    ttl: 7 * 24 * 60 * 60 * 1000,
    storeTimeout: 5_000,
    logger: defaultLogger,
    ...(given as Partial<Options<S>>),
    limit: parseLimit(given.limit ?? '100kb'),
  };
  checkSchema(resolved.customData);
  checkMethods('store', resolved.store, ['claim', 'release'], ['init', 'close']);
  checkMethods('logger', resolved.logger, ['debug', 'info', 'warn', 'error'], []);
  checkDuration('ttl', resolved.ttl);
  checkDuration('storeTimeout', resolved.storeTimeout);
  if (resolved.storeTimeout > MAX_TIMER) {
    // Node fires a longer timer after 1 ms, which would fail every claim of an asynchronous store.
    throw new TypeError(
      `ipnRouter: storeTimeout must be at most ${MAX_TIMER} ms, got ${resolved.storeTimeout}`,
    );
  }
  return resolved;
}

const MAX_TIMER = 2 ** 31 - 1;
const KNOWN = new Set(['customData', 'store', 'ttl', 'limit', 'storeTimeout', 'logger']);

function parseLimit(limit: unknown): number {
  if (typeof limit === 'number' && Number.isInteger(limit) && limit > 0) return limit;
  const match = typeof limit === 'string' ? /^\s*(\d+(?:\.\d+)?)\s*(b|kb|mb|gb)?\s*$/i.exec(limit) : null;
  const bytes = match ? Math.floor(Number(match[1]) * (UNITS[(match[2] ?? 'b').toLowerCase()] ?? 1)) : 0;
  if (bytes > 0) return bytes;
  throw new TypeError(
    `ipnRouter: limit must be a positive number of bytes or a size such as '100kb', got ${String(limit)}`,
  );
}

function checkSchema(schema: unknown): void {
  if (schema === undefined) return;
  // Every zod 4 schema, classic or mini, carries its internals in `_zod`; zod 3 schemas do not.
  if (typeof schema !== 'object' || schema === null || typeof Reflect.get(schema, '_zod') !== 'object') {
    throw new TypeError(
      'ipnRouter: customData must be a zod 4 schema (from zod or zod/mini), such as z.object({ orderId: z.string() })',
    );
  }
}

function checkMethods(name: string, value: unknown, required: string[], optional: string[]): void {
  const target = value as Record<string, unknown> | null;
  const missing = required.filter((method) => typeof target?.[method] !== 'function');
  const wrong = optional.filter(
    (method) => target?.[method] !== undefined && typeof target[method] !== 'function',
  );
  if (missing.length > 0 || wrong.length > 0) {
    throw new TypeError(
      `ipnRouter: ${name} must have the methods ${required.join(', ')}` +
        (optional.length > 0 ? ` (and optionally ${optional.join(', ')})` : '') +
        `; ${[...missing, ...wrong].join(', ')} ${missing.length + wrong.length > 1 ? 'are' : 'is'} not a function`,
    );
  }
}

function checkDuration(name: string, value: unknown): void {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw new TypeError(`ipnRouter: ${name} must be a positive number of milliseconds, got ${String(value)}`);
  }
}
