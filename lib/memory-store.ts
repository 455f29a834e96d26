import type { Store } from './store.js';

/** Options of {@link MemoryStore}. */
export interface MemoryStoreOptions {
  /**
   * Most keys kept at once. When full, the oldest key is forgotten first, so a very late resend of it would
   * be delivered again: size it above the notifications you receive within the router's `ttl`.
   * @default 100_000 (about 12 MB of heap when full)
   */
  maxEntries: number;
  /** Clock in milliseconds, for tests. @default Date.now */
  now: () => number;
}

/**
 * The default store: dedupe in this process's memory. Bounded by TTL and by `maxEntries`, O(1) per
 * operation, no timers (nothing keeps the process alive). It does not survive a restart and is not shared
 * between instances: when you run more than one, give them one shared store.
 *
 * When more than `maxEntries` notifications arrive within the TTL (heavy traffic, or a flood of forged
 * posts), the oldest keys are forgotten to make room, and a late resend of one of them would be emitted
 * again; `evictions` counts them. Forgetting was chosen over refusing new claims, which would answer 503 to
 * every genuine payment until the flood's keys expire.
 *
 * @example
 * app.use('/ipn', ipnRouter({ store: new MemoryStore({ maxEntries: 500_000 }) }));
 */
export class MemoryStore implements Store {
  readonly maxEntries: number;
  readonly #now: () => number;
  /** key -> expiry time. A Map iterates in insertion order, so the oldest claims come first. */
  readonly #expiries = new Map<string, number>();
  #evictions = 0;

  constructor(options: Partial<MemoryStoreOptions> = {}) {
    const maxEntries = options.maxEntries ?? 100_000;
    if (!Number.isInteger(maxEntries) || maxEntries < 1) {
      throw new TypeError(`MemoryStore: maxEntries must be a positive integer, got ${String(maxEntries)}`);
    }
    this.maxEntries = maxEntries;
    this.#now = options.now ?? Date.now;
  }

  /** How many keys were forgotten before they expired, to stay within `maxEntries`. Watch it: above 0, size up. */
  get evictions(): number {
    return this.#evictions;
  }

  /** Number of keys held, expired ones not yet swept included. */
  get size(): number {
    return this.#expiries.size;
  }

  claim(key: string, ttlMs: number): boolean {
    const now = this.#now();
    const expiry = this.#expiries.get(key);
    if (expiry !== undefined && expiry > now) return false;
    // Re-inserting moves the key to the end, keeping the Map in claim order.
    this.#expiries.delete(key);
    this.#sweep(now);
    this.#expiries.set(key, now + ttlMs);
    return true;
  }

  release(key: string): void {
    this.#expiries.delete(key);
  }

  /** Forgets every key. */
  clear(): void {
    this.#expiries.clear();
  }

  /** Drops expired keys from the front, then the oldest while full: amortised O(1) per claim. */
  #sweep(now: number): void {
    for (const [key, expiry] of this.#expiries) {
      const expired = expiry <= now;
      if (!expired && this.#expiries.size < this.maxEntries) return;
      if (!expired) this.#evictions += 1;
      this.#expiries.delete(key);
    }
  }
}
