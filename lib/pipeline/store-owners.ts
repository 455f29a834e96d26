import type { Logger } from '../observability/logger.js';

/**
 * How many open routers each store object has, and whether it was warned about, for the whole process: on
 * `globalThis` under a registered symbol, so that the ESM and CommonJS builds of ipn-kit, or two copies of it
 * that a bundler made, count together.
 */
const OWNERS = Symbol.for('ipn-kit.store-owners');
type Owners = WeakMap<object, { open: number; warned: boolean }>;

function owners(): Owners {
  const scope = globalThis as { [OWNERS]?: Owners };
  return (scope[OWNERS] ??= new WeakMap());
}

/**
 * Counts a router built on `store`, and warns once per store when another router on it is still open: what
 * `next dev` does at every edit (it evaluates the route module again: one more router, with its own timers
 * and recovery passes, on the same pool), and what two routes given one store do (they would dedupe each
 * other's notifications). Resolves a function that uncounts it, for `close()`. Makes no I/O.
 */
export function ownStore(store: object, logger: Logger): () => void {
  const all = owners();
  const count = all.get(store) ?? { open: 0, warned: false };
  all.set(store, count);
  count.open += 1;
  if (count.open > 1 && !count.warned) {
    count.warned = true;
    logger.warn(
      { routers: count.open },
      'a second ipnRouter() was built on the same store object while the first is still open: each runs its ' +
        'own recovery and timers on it. Under `next dev` (hot reload re-evaluates the module at every edit), ' +
        'build the router once per process and keep it on globalThis (docs/frameworks.md, "One router per ' +
        'process"); two routes need a store each (their own prefix or table), or one router mounted on both',
    );
  }
  let counted = true;
  return () => {
    if (!counted) return;
    counted = false;
    count.open -= 1;
  };
}
