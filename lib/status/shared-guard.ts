/**
 * What one request asked of the fleet's budget got.
 * @inline
 */
export interface SharedPermit {
  /** `true`: one request was taken from the fleet's budget; send it. */
  granted: boolean;
  /** Why not, when not granted: the budget is spent, or a cool-down runs. */
  reason?: 'budget' | 'blocked';
  /** When not granted: ms until a request may be sent again. */
  retryAfterMs: number;
  /** Requests the fleet may still send in the current 60 s window. */
  left: number;
}

/**
 * The state every instance of a partner app shares so that, together, they stay within the service's
 * rules: one budget, one cool-down, one cache of answers, one lock per transaction id. `redisGuard()` from
 * `ipn-kit/redis` implements it; give it to `createStatusClient({ shared })`. Every method may reject when
 * the shared store is unreachable: the client then falls back (see `fallbackInstances`).
 * @inline
 */
export interface SharedGuard {
  /** Atomically takes one request from a budget of `maxPerMinute` in any 60 s window, unless a cool-down runs. */
  take(maxPerMinute: number): Promise<SharedPermit>;
  /** Starts (or lengthens) the fleet's cool-down: no instance sends anything for `ms`. */
  block(ms: number): Promise<void>;
  /** The answer cached for `id` (what `write` stored), or `undefined`. */
  read(id: string): Promise<string | undefined>;
  /** Caches an answer for `id` for `ttlMs`. */
  write(id: string, value: string, ttlMs: number): Promise<void>;
  /** Takes the short lock of `id` with `token` for `ms`: `true` when this caller holds it now. */
  lock(id: string, token: string, ms: number): Promise<boolean>;
  /** Frees the lock of `id` if `token` still holds it. */
  unlock(id: string, token: string): Promise<void>;
  /**
   * While the shared store is unreachable, each instance keeps a local guard with the budget divided by this
   * many instances; `undefined` refuses every query instead (`StatusRateLimitError`, reason
   * `guard_unavailable`), rather than risk a block.
   */
  readonly fallbackInstances: number | undefined;
  /** How long a final answer stays in the shared cache, in ms: what bounds the cache. */
  readonly finalTtlMs: number;
  /** Time limit of each call to the shared store, in ms: past it, the call counts as unreachable. */
  readonly timeoutMs: number;
  /**
   * The same shared store, for one of several API keys: its own budget, cool-down, answers and locks (the
   * service counts each key apart, and answers each key only about its own transactions). Required with
   * `apiKeys` naming more than one account.
   */
  scoped?(account: string): SharedGuard;
}
