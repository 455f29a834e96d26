import type { DurableStore, InboxEntry } from '../../lib/index.js';
import type { Lease, ListOptions, Settlement } from '../../lib/stores/store.js';

type Held = InboxEntry & { leaseId?: string | null };

/**
 * A `DurableStore` in memory, for fast tests of the delivery logic (the real one, `PostgresStore`, has its
 * own tests against PostgreSQL). `failNext` makes the next calls of a method reject.
 */
export class MemoryInbox implements DurableStore {
  readonly durable = true as const;
  readonly entries = new Map<string, Held>();
  readonly failures = new Map<string, number>();

  failNext(method: 'receive' | 'lease' | 'settle' | 'replace', times = 1): void {
    this.failures.set(method, times);
  }

  #fail(method: string): void {
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
    await Promise.resolve();
    if (leaseId === undefined || this.entries.get(key)?.leaseId === leaseId) this.entries.delete(key);
  }

  async receive(key: string, record: Record<string, unknown>, lease: Lease): Promise<boolean> {
    await Promise.resolve();
    this.#fail('receive');
    if (this.entries.has(key)) return false;
    const now = new Date();
    const at = key.lastIndexOf(':');
    const [transactionId, state] = [key.slice(0, at), key.slice(at + 1)];
    this.entries.set(key, {
      key,
      transactionId,
      state,
      record: JSON.parse(JSON.stringify(record)) as Record<string, unknown>,
      status: 'received',
      attempts: 1,
      lastError: null,
      receivedAt: now,
      updatedAt: now,
      nextAttemptAt: now,
      deliveredAt: null,
      leaseId: lease.id,
      leaseUntil: new Date(now.getTime() + lease.ms),
    });
    return true;
  }

  async replace(
    key: string,
    leaseId: string,
    record: Record<string, unknown>,
    lease: Lease,
  ): Promise<boolean> {
    await Promise.resolve();
    this.#fail('replace');
    const entry = this.entries.get(key);
    if (entry?.leaseId !== leaseId) return false;
    const now = new Date();
    // One step, as PostgresStore's single UPDATE: the entry is never absent.
    Object.assign(entry, {
      record: JSON.parse(JSON.stringify(record)) as Record<string, unknown>,
      status: 'received',
      attempts: 1,
      lastError: null,
      updatedAt: now,
      nextAttemptAt: now,
      leaseId: lease.id,
      leaseUntil: new Date(now.getTime() + lease.ms),
    });
    return true;
  }

  async lease(lease: Lease, limit: number): Promise<InboxEntry[]> {
    await Promise.resolve();
    this.#fail('lease');
    const now = Date.now();
    const due = [...this.entries.values()].filter(
      (entry) =>
        (entry.status === 'received' || entry.status === 'failed') &&
        entry.nextAttemptAt.getTime() <= now &&
        (entry.leaseUntil === null || entry.leaseUntil.getTime() < now),
    );
    return due.slice(0, limit).map((entry) => {
      Object.assign(entry, {
        leaseId: lease.id,
        leaseUntil: new Date(now + lease.ms),
        attempts: entry.attempts + 1,
      });
      return { ...entry };
    });
  }

  async settle(key: string, leaseId: string, settlement: Settlement): Promise<boolean> {
    await Promise.resolve();
    this.#fail('settle');
    const entry = this.entries.get(key);
    if (entry?.leaseId !== leaseId) return false;
    const now = new Date();
    Object.assign(entry, { status: settlement.status, updatedAt: now, leaseId: null, leaseUntil: null });
    if (settlement.status === 'delivered') entry.deliveredAt = now;
    if (settlement.status !== 'delivered') entry.lastError = settlement.error;
    if (settlement.status === 'failed') entry.nextAttemptAt = settlement.nextAttemptAt;
    return true;
  }

  async list(options: ListOptions = {}): Promise<InboxEntry[]> {
    await Promise.resolve();
    const all = [...this.entries.values()].filter(
      (entry) => options.status === undefined || entry.status === options.status,
    );
    const offset = options.offset ?? 0;
    return all.slice(offset, offset + (options.limit ?? 100));
  }

  async get(key: string): Promise<InboxEntry | undefined> {
    await Promise.resolve();
    return this.entries.get(key);
  }

  async replay(key: string): Promise<boolean> {
    await Promise.resolve();
    const entry = this.entries.get(key);
    if (!entry) return false;
    // As PostgresStore: a live lease is kept, so an attempt still running finishes alone.
    Object.assign(entry, { status: 'received', attempts: 0, nextAttemptAt: new Date() });
    return true;
  }

  async replayDead(): Promise<number> {
    const dead = [...this.entries.values()].filter((entry) => entry.status === 'dead');
    for (const entry of dead) await this.replay(entry.key);
    return dead.length;
  }

  async purge(before: Date): Promise<number> {
    await Promise.resolve();
    let count = 0;
    for (const entry of [...this.entries.values()]) {
      if (entry.status === 'delivered' && entry.deliveredAt !== null && entry.deliveredAt < before) {
        this.entries.delete(entry.key);
        count += 1;
      }
    }
    return count;
  }
}
