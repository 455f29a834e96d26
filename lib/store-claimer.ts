import { messageOf, StoreError } from './errors.js';
import type { Awaitable, Store } from './store.js';

/**
 * Claims dedupe keys through a store, in bounded time: `init` once (again only after it failed), then
 * `claim`, with `timeoutMs` for both together. A synchronous store answers without any timer.
 */
export function createStoreClaimer(store: Store, ttl: number, timeoutMs: number) {
  let initialised: Promise<void> | undefined;
  let ready = store.init === undefined;

  function initialise(): Promise<void> {
    // Deferred by a tick, so that a failure clears `initialised` after it was assigned, not before.
    const attempt: Promise<void> = Promise.resolve()
      .then(() => store.init?.())
      .then(
        () => {
          ready = true;
        },
        (error: unknown) => {
          if (initialised === attempt) initialised = undefined; // the next request tries again
          throw error;
        },
      );
    return attempt;
  }

  /**
   * Waits for `pending` at most `timeoutMs`. A claim that answers `true` after that still belongs to this
   * caller, which was told the store failed: `late` lets it deliver then (the service's resend, meanwhile or
   * later, is a duplicate), so the notification is neither lost nor delivered twice.
   */
  function bounded(pending: Promise<unknown>, late: () => void): Promise<boolean> {
    return new Promise((resolve, reject) => {
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        reject(new Error(`no answer within ${timeoutMs} ms`));
      }, timeoutMs);
      pending.then(
        (claimed) => {
          if (timedOut) {
            if (claimed === true) safely(late);
            return;
          }
          clearTimeout(timer);
          try {
            resolve(checked(claimed));
          } catch (error) {
            reject(asError(error));
          }
        },
        (error: unknown) => {
          if (timedOut) return;
          clearTimeout(timer);
          reject(asError(error));
        },
      );
    });
  }

  return {
    /**
     * Resolves `true` (first delivery), `false` (a resend) or a `StoreError` (the store failed or timed out).
     * Never rejects. `operation` replaces `store.claim` (a durable store's `receive`).
     */
    async claim(
      key: string,
      late: () => void,
      operation: () => Awaitable<boolean> = () => store.claim(key, ttl),
    ): Promise<boolean | StoreError> {
      try {
        if (ready) {
          const claimed = operation();
          return typeof claimed === 'boolean' ? claimed : await bounded(Promise.resolve(claimed), late);
        }
        // One init at a time: one that hangs is waited on again (bounded per request), not started twice.
        const init = (initialised ??= initialise());
        return await bounded(init.then(operation), late);
      } catch (cause) {
        return new StoreError(`the store failed to claim ${key}: ${messageOf(cause)}`, { cause });
      }
    },
  };
}

/**
 * A claim must answer `true` or `false`. Anything else (a store that forgets to return, or returns Redis's
 * `'OK'`) is a store failure: taking `undefined` for "already claimed" would drop every payment as a resend.
 */
function checked(claimed: unknown): boolean {
  if (typeof claimed === 'boolean') return claimed;
  throw new TypeError(`store.claim must return true or false (or a promise of it), got ${String(claimed)}`);
}

/** Runs a callback from a detached promise chain, where a throw would become an unhandled rejection. */
function safely(callback: () => void): void {
  try {
    callback();
  } catch {
    // The caller reports its own failures; nothing is left to report to here.
  }
}

function asError(value: unknown): Error {
  return value instanceof Error ? value : new Error(String(value));
}
