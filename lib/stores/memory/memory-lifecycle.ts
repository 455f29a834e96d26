import type { FinalState } from '../../notification/schema.js';
import { verdictOf, type LifecycleStore, type LifecycleVerdict } from '../lifecycle-store.js';

/**
 * Each transaction's accepted final state in this process's memory: at most `maxEntries` transactions (the
 * oldest forgotten first), each kept `ttlMs` from its last decision, and never less than an earlier one
 * left it. Synchronous, hence atomic in the one process it serves.
 * @inline
 */
export class MemoryLifecycle implements LifecycleStore {
  readonly #states = new Map<string, { state: FinalState; until: number }>();
  readonly #maxEntries: number;
  readonly #now: () => number;

  constructor(maxEntries: number, now: () => number) {
    this.#maxEntries = maxEntries;
    this.#now = now;
  }

  decide(transactionId: string, state: FinalState, ttlMs: number): LifecycleVerdict {
    const now = this.#now();
    const held = this.#states.get(transactionId);
    const recorded = held !== undefined && held.until > now ? held.state : undefined;
    const verdict = verdictOf(recorded, state);
    // A SUCCESSFUL is never overwritten by a FAILED; the record moves to the end (the newest).
    const kept: FinalState = recorded === 'SUCCESSFUL' ? 'SUCCESSFUL' : state;
    this.#states.delete(transactionId);
    // Never sooner than an earlier decision left it: a router with a shorter ttlMs never cuts the time.
    const until = Math.max(now + ttlMs, recorded === undefined ? 0 : held!.until);
    this.#states.set(transactionId, { state: kept, until });
    if (this.#states.size > this.#maxEntries) {
      const oldest = this.#states.keys().next();
      if (oldest.done !== true) this.#states.delete(oldest.value);
    }
    return verdict;
  }
}
