import type { DurableStore, InboxEntry } from '../../lib/index.js';
import type { Lease, ListOptions, Settlement, StatusCounts } from '../../lib/stores/store.js';
import { MemoryInbox as Inbox } from '../../lib/stores/memory/memory-inbox.js';
import { replayEveryDead } from '../../lib/stores/store-core.js';

/** The methods whose next calls {@link MemoryInbox.failNext} can make reject. */
type Failing = 'receive' | 'lease' | 'settle' | 'replace';

/** What the tests read of the inbox: its entries by key, as copies (changing one changes nothing). */
export interface EntriesView {
  get(key: string): InboxEntry | undefined;
  values(): InboxEntry[];
  readonly size: number;
}

/**
 * A `DurableStore` over the library's own in-memory inbox (`lib/stores/memory/memory-inbox.ts`, what `MemoryStore`
 * keeps at least once), so that the delivery tests run against the real lease and settlement rules, not a
 * copy of them. It adds only what tests need: {@link failNext} (the next calls of a method reject), a
 * synchronous view of the {@link entries} for `until(...)`, and a `claim` that is a `receive` (a store
 * that is durable and nothing else). Every method answers in a later microtask, as a real store would.
 */
export class MemoryInbox implements DurableStore {
  readonly durable = true as const;
  /** How many of the next calls of each method reject. */
  readonly failures = new Map<Failing, number>();
  // Never evicts: a test sees every entry it made.
  readonly #inbox = new Inbox(Number.MAX_SAFE_INTEGER, () => Date.now());

  /** The entries, read synchronously; each read is a copy. */
  readonly entries: EntriesView = {
    get: (key) => this.#inbox.get(key),
    values: () => this.#inbox.list({ limit: Number.MAX_SAFE_INTEGER }),
    get size() {
      return this.values().length;
    },
  };

  /** Makes the next `times` calls of `method` reject with an error saying it was injected. */
  failNext(method: Failing, times = 1): void {
    this.failures.set(method, times);
  }

  async #turn(method?: Failing): Promise<void> {
    await Promise.resolve();
    if (method === undefined) return;
    const left = this.failures.get(method) ?? 0;
    if (left > 0) {
      this.failures.set(method, left - 1);
      throw new Error(`${method} failed (injected)`);
    }
  }

  async claim(key: string): Promise<boolean> {
    return this.receive(key, {}, { id: 'claim', ms: 0 });
  }

  async release(key: string, leaseId?: string): Promise<void> {
    await this.#turn();
    this.#inbox.delete(key, leaseId);
  }

  async receive(key: string, record: Record<string, unknown>, lease: Lease): Promise<boolean> {
    await this.#turn('receive');
    return this.#inbox.receive(key, record, lease);
  }

  async replace(
    key: string,
    leaseId: string,
    record: Record<string, unknown>,
    lease: Lease,
  ): Promise<boolean> {
    await this.#turn('replace');
    return this.#inbox.replace(key, leaseId, record, lease);
  }

  async lease(lease: Lease, limit: number): Promise<InboxEntry[]> {
    await this.#turn('lease');
    return this.#inbox.lease(lease, limit);
  }

  async settle(key: string, leaseId: string, settlement: Settlement): Promise<boolean> {
    await this.#turn('settle');
    return this.#inbox.settle(key, leaseId, settlement);
  }

  async list(options?: ListOptions): Promise<InboxEntry[]> {
    await this.#turn();
    return this.#inbox.list(options);
  }

  async countByStatus(receivedFrom?: Date): Promise<StatusCounts> {
    await this.#turn();
    return this.#inbox.countByStatus(receivedFrom);
  }

  async get(key: string): Promise<InboxEntry | undefined> {
    await this.#turn();
    return this.#inbox.get(key);
  }

  async replay(key: string, delayMs?: number): Promise<boolean> {
    await this.#turn();
    return this.#inbox.replay(key, delayMs);
  }

  replayDead(): Promise<number> {
    return replayEveryDead(this);
  }

  async purge(before: Date): Promise<number> {
    await this.#turn();
    return this.#inbox.purge(before);
  }
}
