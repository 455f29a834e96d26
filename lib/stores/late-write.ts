import { DeliveryError } from '../shared/errors.js';

/**
 * A write through a delivery attempt's `tx` or `db` once the attempt has ended (abandoned when its listeners
 * ran past `leaseMs`, failed, or delivered): refused, so that a late credit never lands outside the
 * delivery's transaction (on its own, committed at once, or in another attempt's). One class and one
 * wording for every store and adapter.
 */
export class LateWriteError extends DeliveryError {
  constructor(key: string, what?: string) {
    super(
      `the delivery transaction of ${key} has ended (a listener failed, or ran past leaseMs, or the attempt ` +
        `was delivered): this write${what === undefined ? '' : ` (${what})`} was not made, and lands ` +
        'nowhere; a failed attempt makes it again with the next attempt, in its own transaction. Await ' +
        'every write in the listener',
    );
  }
}

/**
 * `handle` (what listeners get as `tx` or `db`) as listeners get it: the same object while `usable()` holds,
 * and one that throws a {@link LateWriteError} at any use after (reading a member, or calling it, as a Knex
 * transaction is called). Its methods run on the object itself (a class with private fields, or a native
 * one, refuses another `this`), so they work as the ORM's own. A statement or query builder
 * taken from it before the end is the ORM's own, and still refused by the ORM or the store's connection.
 */
export function refuseLateWrites<T>(handle: T, usable: () => boolean, key: string): T {
  if ((typeof handle !== 'object' && typeof handle !== 'function') || handle === null) return handle;
  const target = handle as object;
  /** Each method as handed out, the same one each time it is read (`tx.query === tx.query`). */
  const methods = new WeakMap<object, unknown>();
  const guarded: object = new Proxy(target, {
    get(_, property) {
      // `then` is read by `await` and by promise resolution: an ended handle is not a thenable, not a refusal.
      if (!usable() && typeof property === 'string' && property !== 'then') {
        throw new LateWriteError(key, `.${property}`);
      }
      const value: unknown = Reflect.get(target, property, target);
      if (typeof value !== 'function' || property === 'constructor') return value;
      let method = methods.get(value);
      if (method === undefined) {
        // Run on the object itself when called on the guard (or on nothing), with the function's own
        // members still readable (a Knex `raw`, a tagged template's helpers).
        // A method read in time and called after the end (`const { query } = tx`) is refused as well.
        const name = String(property);
        method = new Proxy(value, {
          apply: (fn, thisArg, args) => {
            if (!usable()) throw new LateWriteError(key, `.${name}()`);
            return Reflect.apply(
              fn,
              thisArg === guarded || thisArg === undefined ? target : thisArg,
              args,
            ) as unknown;
          },
        });
        methods.set(value, method);
      }
      return method;
    },
    apply(_, thisArg, args) {
      if (!usable()) throw new LateWriteError(key, 'a call');
      return Reflect.apply<unknown, unknown[], unknown>(
        target as (...args: unknown[]) => unknown,
        thisArg,
        args,
      );
    },
  });
  targets.set(guarded, target);
  return guarded as T;
}

/** Each guard of {@link refuseLateWrites}'s own object. */
const targets = new WeakMap<object, object>();

/** The object `handle` guards (for a store that keeps state by its own handle), or `handle` itself. */
export function unguarded<T>(handle: T): T {
  return (
    (typeof handle === 'object' || typeof handle === 'function') && handle !== null
      ? (targets.get(handle) ?? handle)
      : handle
  ) as T;
}
