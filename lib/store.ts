/** A value, or a promise of it: store methods may answer either way. */
export type Awaitable<T> = T | Promise<T>;

/**
 * Where the router remembers which notifications it has already handled, so that the service's resends are
 * dropped. The key is `transaction_id + ':' + state`. Every method may return a value or a promise.
 *
 * A store must make `claim` atomic: when many calls race for one key, exactly one of them gets `true`,
 * including across processes if the store is shared. A read-then-write (`get`, then `set`) is not atomic.
 *
 * @example
 * // A store over a shared Map-like service with an atomic "set if absent":
 * const store: Store = {
 *   claim: (key, ttlMs) => kv.setIfAbsent(key, '1', ttlMs), // true when this call set it
 *   release: (key) => kv.delete(key),
 * };
 * app.use('/ipn', ipnRouter({ store }));
 */
export interface Store {
  /**
   * Atomically claims `key` for `ttlMs` milliseconds.
   * @returns `true` when this call claimed the key (first delivery), `false` when it was already claimed and
   * has not expired (a resend).
   */
  claim(key: string, ttlMs: number): Awaitable<boolean>;
  /**
   * Frees `key`, so that the next claim of it succeeds. The router's default (at-most-once) mode never needs
   * it; it is the way back for anything that claims a key and then cannot process the notification, so that
   * the service's resend is processed instead of dropped (an admin tool, a verification step).
   */
  release(key: string): Awaitable<void>;
  /**
   * Optional: called once, before the first claim; requests wait for it up to the router's `storeTimeout`,
   * then answer 503. A failure is retried by the next request; one that never settles is never started
   * twice, so give it a timeout of its own.
   */
  init?(): Awaitable<void>;
  /** Optional: called by `ipn.close()`. */
  close?(): Awaitable<void>;
}
