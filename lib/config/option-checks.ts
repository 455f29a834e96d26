import { isStandardSchema } from '../notification/standard-schema.js';

// The checks of ipnRouter()'s options: each throws a TypeError that names the option, at construction.

const UNITS: Record<string, number> = { b: 1, kb: 1024, mb: 1024 ** 2, gb: 1024 ** 3 };

/** Throws unless `secret` is undefined, or a string (or a non-empty array of them) of 16 characters or more. */
export function checkSecret(secret: unknown): void {
  if (secret === undefined) return;
  const secrets: unknown[] = Array.isArray(secret) ? secret : [secret];
  if (secrets.length === 0 || secrets.some((item) => typeof item !== 'string' || item.length < 16)) {
    throw new TypeError(
      'ipnRouter: secret must be a string of at least 16 characters (or an array of them, during a rotation), ' +
        "such as require('node:crypto').randomBytes(24).toString('base64url')",
    );
  }
}

/** Node's longest timer: a longer one fires after 1 ms. */
export const MAX_TIMER = 2 ** 31 - 1;

/** The body limit in bytes, from a number of bytes or a size such as `'100kb'`. */
export function parseLimit(limit: unknown): number {
  if (typeof limit === 'number' && Number.isInteger(limit) && limit > 0) return limit;
  const match = typeof limit === 'string' ? /^\s*(\d+(?:\.\d+)?)\s*(b|kb|mb|gb)?\s*$/i.exec(limit) : null;
  const bytes = match ? Math.floor(Number(match[1]) * (UNITS[(match[2] ?? 'b').toLowerCase()] ?? 1)) : 0;
  if (bytes > 0) return bytes;
  throw new TypeError(
    `ipnRouter: limit must be a positive number of bytes or a size such as '100kb', got ${String(limit)}`,
  );
}

/** Throws unless `schema` is undefined or a Standard Schema. */
export function checkSchema(schema: unknown): void {
  if (schema === undefined) return;
  if (!isStandardSchema(schema)) {
    throw new TypeError(
      'ipnRouter: customData must be a Standard Schema (zod 3.24+ or 4, valibot, arktype, ...), such as ' +
        'z.object({ orderId: z.string() })',
    );
  }
}

/** Throws unless `value` has the `required` methods, and `optional` ones are functions when present. */
export function checkMethods(name: string, value: unknown, required: string[], optional: string[]): void {
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

/** Throws unless `value` is a positive number of milliseconds, at most `max`. */
export function checkDuration(name: string, value: unknown, max = Infinity): void {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw new TypeError(`ipnRouter: ${name} must be a positive number of milliseconds, got ${String(value)}`);
  }
  if (value > max) throw new TypeError(`ipnRouter: ${name} must be at most ${max} ms, got ${value}`);
}
