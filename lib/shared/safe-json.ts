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

/**
 * A deep copy of a JSON-like value without `__proto__`, `constructor` and `prototype` keys. A loop with its
 * own stack, not recursion: a valid body nested a few thousand levels deep must not overflow the call stack.
 */
export function withoutForbiddenKeys(value: unknown): unknown {
  const root = shallowCopy(value);
  const pending: Array<[source: unknown, copy: unknown]> = [[value, root]];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const [source, copy] = next;
    if (source === copy) continue; // a scalar or a Buffer: nothing inside to copy
    const array = Array.isArray(source);
    for (const key of Object.keys(source as object)) {
      if (!array && FORBIDDEN.has(key)) continue;
      const item = (source as Record<string, unknown>)[key];
      const child = shallowCopy(item);
      (copy as Record<string, unknown>)[key] = child;
      pending.push([item, child]);
    }
  }
  return root;
}

/**
 * Whether arrays and objects nest more than `max` levels deep in `value` (an array or object is one level,
 * each one inside it one more). A loop with its own stack, not recursion: it must answer for a body nested
 * tens of thousands of levels deep, which every recursive copy downstream (`structuredClone`,
 * `JSON.stringify`, a store's walk) would overflow on. Stops at the first branch past `max`.
 */
export function nestsDeeperThan(value: unknown, max: number): boolean {
  const pending: Array<[item: unknown, depth: number]> = [[value, 1]];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const [item, depth] = next;
    if (typeof item !== 'object' || item === null || Buffer.isBuffer(item)) continue;
    if (depth > max) return true;
    for (const child of Object.values(item)) {
      if (typeof child === 'object' && child !== null) pending.push([child, depth + 1]);
    }
  }
  return false;
}

/** An empty container of the same kind, or the value itself when it holds nothing to copy. */
function shallowCopy(value: unknown): unknown {
  if (Array.isArray(value)) return new Array<unknown>(value.length);
  if (typeof value !== 'object' || value === null || Buffer.isBuffer(value)) return value;
  return {};
}

/** Whether a key may be copied onto a plain object. */
export function isSafeKey(key: string): boolean {
  return !FORBIDDEN.has(key);
}
