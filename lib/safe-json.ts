const FORBIDDEN = new Set(['__proto__', 'constructor', 'prototype']);
// A unicode escape can spell a forbidden key ("__pro\u0074o__"), so any escape takes the careful path too.
const SUSPICIOUS = /__proto__|constructor|prototype|\\u/;

/**
 * `JSON.parse`, minus the keys that can pollute a prototype when a consumer merges the result
 * (`__proto__`, `constructor`, `prototype`), at any depth. The common case pays one regex test.
 * @throws SyntaxError when `text` is not JSON.
 */
export function parseJson(text: string): unknown {
  const value: unknown = JSON.parse(text);
  return SUSPICIOUS.test(text) ? withoutForbiddenKeys(value) : value;
}

/** A deep copy of a JSON-like value without `__proto__`, `constructor` and `prototype` keys. */
export function withoutForbiddenKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutForbiddenKeys);
  if (typeof value !== 'object' || value === null || Buffer.isBuffer(value)) return value;
  const copy: Record<string, unknown> = {};
  for (const key of Object.keys(value)) {
    if (!FORBIDDEN.has(key)) copy[key] = withoutForbiddenKeys((value as Record<string, unknown>)[key]);
  }
  return copy;
}

/** Whether a key may be copied onto a plain object. */
export function isSafeKey(key: string): boolean {
  return !FORBIDDEN.has(key);
}
