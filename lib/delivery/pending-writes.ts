/**
 * The store writes a router started itself and awaits nowhere (a key released, an expectation settled or
 * made due again, a late claim's decision): so that `close()` can wait for them before the store is closed.
 * With a durable store, a write still running once `close()` resolved runs into the pool the host ends then:
 * a release lost leaves the key claimed for `ttlMs`, and the service's resend is answered as a duplicate.
 */
export function createPendingWrites() {
  // A set, not a promise per write kept forever: only close() ever waits.
  const pending = new Set<Promise<unknown>>();

  return {
    /** Counts `write` until it settles; resolves as it does. The caller handles its failure, as before. */
    add<T>(write: Promise<T>): Promise<T> {
      pending.add(write);
      const done = (): void => void pending.delete(write);
      write.then(done, done);
      return write;
    },
    /** How many writes are still running. */
    get size(): number {
      return pending.size;
    },
    /**
     * Resolves once no write is running (writes added while it waits are waited for too), or after `ms`
     * with how many are still running then (0 when all settled). Never rejects; leaves no timer behind.
     */
    async settled(ms: number): Promise<number> {
      if (pending.size === 0) return 0;
      let timer: ReturnType<typeof setTimeout> | undefined;
      const late = new Promise<'late'>((resolve) => {
        timer = setTimeout(() => resolve('late'), ms);
      });
      try {
        while (pending.size > 0) {
          if ((await Promise.race([Promise.allSettled([...pending]), late])) === 'late') break;
        }
        return pending.size;
      } finally {
        clearTimeout(timer);
      }
    },
  };
}

/** What {@link createPendingWrites} returns. */
export type PendingWrites = ReturnType<typeof createPendingWrites>;
