import { blankPersonal } from '../redact-record.js';
import type {
  DeliveryStatus,
  InboxEntry,
  PurgedStatus,
  Lease,
  ListOptions,
  Settlement,
  StatusCounts,
} from '../store.js';

type Held = InboxEntry & { leaseId: string | null };

/**
 * The inbox of {@link MemoryStore} at least once: notifications and their delivery state in this process's
 * memory. Every method runs to completion in one turn of the event loop, so each is atomic. Delivered
 * entries are forgotten oldest first beyond `maxEntries`; undelivered ones never are.
 */
export class MemoryInbox {
  readonly #entries = new Map<string, Held>();
  /** Keys of `received` and `failed` entries, in the order received: what `lease` looks through. */
  readonly #pending = new Set<string>();
  readonly #maxEntries: number;
  readonly #now: () => number;
  /** How many delivered entries were forgotten to stay within `maxEntries`. */
  evictions = 0;

  constructor(maxEntries: number, now: () => number) {
    this.#maxEntries = maxEntries;
    this.#now = now;
  }

  get size(): number {
    return this.#entries.size;
  }

  /** Forgets `key`; given `leaseId`, only while that lease holds it. */
  delete(key: string, leaseId?: string): void {
    if (leaseId !== undefined && this.#entries.get(key)?.leaseId !== leaseId) return;
    this.#entries.delete(key);
    this.#pending.delete(key);
  }

  /**
   * Puts `record` in place of the entry held by `leaseId`, in one step: received, attempts 1, last error
   * cleared, due now, leased to `lease`. `false`, changing nothing, when `leaseId` no longer holds it.
   */
  replace(key: string, leaseId: string, record: Record<string, unknown>, lease: Lease): boolean {
    const entry = this.#entries.get(key);
    if (entry === undefined || entry.leaseId !== leaseId) return false;
    const now = new Date(this.#now());
    Object.assign(entry, {
      record: structuredClone(record),
      status: 'received',
      attempts: 1,
      lastError: null,
      nextAttemptAt: now,
      updatedAt: now,
      leaseId: lease.id,
      leaseUntil: new Date(now.getTime() + lease.ms),
    });
    this.#pending.add(key);
    return true;
  }

  /** Whether the inbox has an entry of `key`, whatever its status. */
  has(key: string): boolean {
    return this.#entries.has(key);
  }

  receive(key: string, record: Record<string, unknown>, lease: Lease): boolean {
    if (this.#entries.has(key)) return false;
    const now = new Date(this.#now());
    const at = key.lastIndexOf(':');
    this.#entries.set(key, {
      key,
      transactionId: key.slice(0, at),
      state: key.slice(at + 1),
      // A copy: the caller's object may change after the answer.
      record: structuredClone(record),
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
    this.#pending.add(key);
    this.#evict();
    return true;
  }

  lease(lease: Lease, limit: number): InboxEntry[] {
    const now = this.#now();
    const taken: InboxEntry[] = [];
    for (const key of this.#pending) {
      if (taken.length >= limit) break;
      const entry = this.#entries.get(key)!;
      if (entry.nextAttemptAt.getTime() > now) continue;
      if (entry.leaseUntil !== null && entry.leaseUntil.getTime() >= now) continue;
      Object.assign(entry, {
        leaseId: lease.id,
        leaseUntil: new Date(now + lease.ms),
        attempts: entry.attempts + 1,
        updatedAt: new Date(now),
      });
      taken.push(copy(entry));
    }
    return taken;
  }

  settle(key: string, leaseId: string, settlement: Settlement): boolean {
    const entry = this.#entries.get(key);
    if (entry === undefined || entry.leaseId !== leaseId) return false;
    const now = new Date(this.#now());
    Object.assign(entry, { status: settlement.status, updatedAt: now, leaseId: null, leaseUntil: null });
    if (settlement.status === 'delivered') entry.deliveredAt = now;
    else entry.lastError = settlement.error;
    if (settlement.status === 'failed') entry.nextAttemptAt = settlement.nextAttemptAt;
    else this.#pending.delete(key);
    return true;
  }

  list(options: ListOptions = {}): InboxEntry[] {
    const { status, transactionId, customDataContains, receivedFrom, receivedBefore } = options;
    const { order = 'oldest', limit = 100, offset = 0 } = options;
    const needle = customDataContains?.toLowerCase();
    const all = [...this.#entries.values()].filter(
      (entry) =>
        (status === undefined || entry.status === status) &&
        (transactionId === undefined || entry.transactionId === transactionId) &&
        (needle === undefined || customDataOf(entry).toLowerCase().includes(needle)) &&
        (receivedFrom === undefined || entry.receivedAt >= receivedFrom) &&
        (receivedBefore === undefined || entry.receivedAt < receivedBefore),
    );
    if (order === 'newest') all.reverse();
    return all.slice(offset, offset + limit).map(copy);
  }

  countByStatus(receivedFrom?: Date): StatusCounts {
    const counts: StatusCounts = { received: 0, delivered: 0, failed: 0, dead: 0 };
    for (const entry of this.#entries.values())
      if (receivedFrom === undefined || entry.receivedAt >= receivedFrom) counts[entry.status] += 1;
    return counts;
  }

  get(key: string): InboxEntry | undefined {
    const entry = this.#entries.get(key);
    return entry && copy(entry);
  }

  /** As `PostgresStore.replay`: due now, attempts 0; a live lease is kept (its attempt finishes first). */
  replay(key: string, delayMs = 0, from?: readonly DeliveryStatus[]): boolean {
    const entry = this.#entries.get(key);
    if (entry === undefined || (from !== undefined && !from.includes(entry.status))) return false;
    const now = new Date(this.#now());
    const due = new Date(now.getTime() + delayMs);
    Object.assign(entry, { status: 'received', attempts: 0, nextAttemptAt: due, updatedAt: now });
    this.#pending.add(key);
    return true;
  }

  /**
   * `replay(key, 0, from)` with `record` in place of the entry's, in one step: only while its status is one of
   * `from` and no live lease holds it (as `lease` sees one).
   */
  replayWith(key: string, record: Record<string, unknown>, from: readonly DeliveryStatus[]): boolean {
    const entry = this.#entries.get(key);
    if (entry === undefined || !from.includes(entry.status)) return false;
    const now = new Date(this.#now());
    if (entry.leaseUntil !== null && entry.leaseUntil.getTime() >= now.getTime()) return false;
    Object.assign(entry, {
      record: structuredClone(record),
      status: 'received',
      attempts: 0,
      nextAttemptAt: now,
      updatedAt: now,
    });
    this.#pending.add(key);
    return true;
  }

  purge(before: Date, status: PurgedStatus = 'delivered'): number {
    let count = 0;
    for (const entry of [...this.#entries.values()]) {
      if (entry.status !== status) continue;
      const at = status === 'delivered' ? entry.deliveredAt : entry.updatedAt;
      if (at !== null && at < before) {
        this.#entries.delete(entry.key);
        count += 1;
      }
    }
    return count;
  }

  /** Blanks the customer's name and number in delivered and dead entries received before `before`. */
  redact(before: Date): number {
    let count = 0;
    for (const entry of this.#entries.values()) {
      if ((entry.status !== 'delivered' && entry.status !== 'dead') || entry.receivedAt >= before) continue;
      const blanked = blankPersonal(entry.record);
      if (blanked === undefined) continue;
      entry.record = blanked;
      count += 1;
    }
    return count;
  }

  /** Forgets the oldest delivered entries while over `maxEntries`; a resend of one is then new again. */
  #evict(): void {
    if (this.#entries.size <= this.#maxEntries) return;
    for (const entry of this.#entries.values()) {
      if (this.#entries.size <= this.#maxEntries) break;
      if (entry.status !== 'delivered') continue;
      this.#entries.delete(entry.key);
      this.evictions += 1;
    }
  }
}

/**
 * What callers get: a copy without the lease id, so they cannot change the inbox by accident (a caller that
 * edits `entry.record`, or a date in place, must not edit what a later attempt delivers). Dates are copied
 * with `new Date`, not `structuredClone`, which under jest makes dates of another realm (not `instanceof Date`).
 */
function copy(entry: Held): InboxEntry {
  const {
    leaseId: _leaseId,
    record,
    receivedAt,
    updatedAt,
    nextAttemptAt,
    deliveredAt,
    leaseUntil,
    ...rest
  } = entry;
  return {
    ...rest,
    record: structuredClone(record),
    receivedAt: new Date(receivedAt),
    updatedAt: new Date(updatedAt),
    nextAttemptAt: new Date(nextAttemptAt),
    deliveredAt: deliveredAt && new Date(deliveredAt),
    leaseUntil: leaseUntil && new Date(leaseUntil),
  };
}

function customDataOf(entry: Held): string {
  const data = entry.record.custom_data;
  return typeof data === 'string' ? data : '';
}
