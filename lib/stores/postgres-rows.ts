import type { InboxSql } from './postgres-sql.js';
import type { DeliveryStatus, InboxEntry, Lease, Settlement } from './store.js';

/** The statement and values that end an attempt as `settlement` says. */
export function settleQuery(
  sql: InboxSql,
  key: string,
  leaseId: string,
  settlement: Settlement,
): [string, unknown[]] {
  switch (settlement.status) {
    case 'delivered':
      return [sql.delivered, [key, leaseId]];
    case 'failed': {
      const { nextAttemptAt } = settlement;
      if (!(nextAttemptAt instanceof Date) || Number.isNaN(nextAttemptAt.getTime())) {
        throw new TypeError(
          `PostgresStore.settle: nextAttemptAt must be a valid Date, got ${String(nextAttemptAt)}`,
        );
      }
      return [sql.failed, [key, leaseId, String(settlement.error), nextAttemptAt]];
    }
    case 'dead':
      return [sql.dead, [key, leaseId, String(settlement.error)]];
    default:
      throw new TypeError(
        `PostgresStore.settle: status must be delivered, failed or dead, got ${String((settlement as { status: unknown }).status)}`,
      );
  }
}

/** `transaction_id:state`, split at the last `:` (a transaction id may contain one; a state never does). */
export function splitKey(key: string): [string, string] {
  const at = typeof key === 'string' ? key.lastIndexOf(':') : -1;
  if (at === -1) {
    throw new TypeError(`PostgresStore: a key must be transaction_id:state, got ${String(key)}`);
  }
  return [key.slice(0, at), key.slice(at + 1)];
}

/** The lease's length, checked. */
export function leaseMs(lease: Lease): number {
  if (typeof lease?.id !== 'string' || lease.id === '' || !Number.isFinite(lease.ms) || lease.ms <= 0) {
    throw new TypeError(
      `PostgresStore: a lease must have a non-empty id and a positive ms, got ${JSON.stringify(lease)}`,
    );
  }
  return lease.ms;
}

/** A row as `pg` returns it by default; `toEntry` also accepts strings, for pools with custom type parsers. */
interface InboxRow {
  key: string;
  transaction_id: string;
  state: string;
  record: unknown;
  status: DeliveryStatus;
  attempts: number | string;
  last_error: string | null;
  received_at: Date | string;
  updated_at: Date | string;
  next_attempt_at: Date | string;
  delivered_at: Date | string | null;
  lease_until: Date | string | null;
}

/** A row as an `InboxEntry`: camelCase, dates as `Date`, the record as an object. */
export function toEntry(value: unknown): InboxEntry {
  const row = value as InboxRow;
  return {
    key: row.key,
    transactionId: row.transaction_id,
    state: row.state,
    record: (typeof row.record === 'string' ? JSON.parse(row.record) : row.record) as Record<string, unknown>,
    status: row.status,
    attempts: Number(row.attempts),
    lastError: row.last_error,
    receivedAt: toDate(row.received_at),
    updatedAt: toDate(row.updated_at),
    nextAttemptAt: toDate(row.next_attempt_at),
    deliveredAt: row.delivered_at === null ? null : toDate(row.delivered_at),
    leaseUntil: row.lease_until === null ? null : toDate(row.lease_until),
  };
}

function toDate(value: Date | string): Date {
  return value instanceof Date ? value : new Date(value);
}
