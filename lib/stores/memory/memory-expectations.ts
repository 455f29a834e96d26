import type { Expectation, ExpectationStore } from '../expectation-store.js';

/**
 * Expectations in this process's memory (the `MemoryStore`'s): lost on a restart and not shared between
 * instances, like its dedupe keys. Bounded: past `maxEntries`, the oldest is forgotten.
 * @inline
 */
export class MemoryExpectations implements ExpectationStore {
  readonly #entries = new Map<string, Expectation>();
  readonly #maxEntries: number;
  readonly #now: () => number;
  #lock: { owner: string; until: number } | undefined;

  constructor(maxEntries: number, now: () => number) {
    this.#maxEntries = maxEntries;
    this.#now = now;
  }

  put(expectation: Expectation): void {
    this.#entries.delete(expectation.transactionId);
    this.#entries.set(expectation.transactionId, { ...expectation });
    if (this.#entries.size > this.#maxEntries)
      this.#entries.delete(this.#entries.keys().next().value as string);
  }

  get(transactionId: string): Expectation | undefined {
    const entry = this.#entries.get(transactionId);
    return entry && { ...entry };
  }

  delete(transactionId: string): void {
    this.#entries.delete(transactionId);
  }

  takeDue(now: number, nextDueAt: number, limit: number): Expectation[] {
    const taken: Expectation[] = [];
    for (const entry of this.#entries.values()) {
      if (taken.length >= limit) break;
      if (entry.dueAt > now) continue;
      entry.dueAt = nextDueAt;
      entry.attempts += 1;
      taken.push({ ...entry });
    }
    return taken;
  }

  lockSweep(owner: string, ms: number): boolean {
    const now = this.#now();
    if (this.#lock && this.#lock.owner !== owner && this.#lock.until > now) return false;
    this.#lock = { owner, until: now + ms };
    return true;
  }

  unlockSweep(owner: string): void {
    if (this.#lock?.owner === owner) this.#lock = undefined;
  }
}
