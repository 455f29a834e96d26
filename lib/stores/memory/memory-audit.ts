import { auditPage } from '../audit-page.js';
import type { AuditEntry, AuditListOptions, AuditLog } from '../store.js';

/**
 * The audit log of {@link MemoryStore}: operator actions in this process's memory, the oldest forgotten beyond `max`.
 * @inline
 */
export class MemoryAudit implements AuditLog {
  readonly #entries: AuditEntry[] = [];
  readonly #max: number;
  readonly #now: () => number;

  constructor(max: number, now: () => number) {
    this.#max = max;
    this.#now = now;
  }

  record(entry: Omit<AuditEntry, 'at'>): Promise<void> {
    // A copy through JSON, as the other stores keep it: a later change to the caller's object changes nothing.
    const detail = JSON.parse(JSON.stringify(entry.detail)) as Record<string, unknown>;
    this.#entries.push({ action: entry.action, actor: entry.actor, detail, at: new Date(this.#now()) });
    if (this.#entries.length > this.#max) this.#entries.shift();
    return Promise.resolve();
  }

  list(options?: AuditListOptions): Promise<AuditEntry[]> {
    const { limit, offset } = auditPage(options);
    const newest = this.#entries
      .slice()
      .reverse()
      .slice(offset, offset + limit);
    return Promise.resolve(newest.map((entry) => ({ ...entry, at: new Date(entry.at) })));
  }
}
