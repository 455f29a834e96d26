import { messageOf, StoreError } from '../shared/errors.js';
import { STATUSES } from './list-options.js';
import type { DeliveryStatus, DurableStore, InboxEntry, Lease, StatusCounts } from './store.js';

/**
 * A NUL or a lone surrogate: PostgreSQL refuses a NUL in text, and the drivers write a lone surrogate as
 * U+FFFD, so a key or lease id holding one would fail the batch it is sent in, or come back as another.
 * The router never makes one (a transaction id is letters, digits and `._:-`).
 */
// eslint-disable-next-line no-control-regex -- the NUL is exactly what is looked for
export const UNSTORABLE = /[\u0000\p{Cs}]/u;

/**
 * Checks that a store keeps `key` exactly: no NUL, no lone surrogate, and at most `maxLength` characters
 * when its column is that narrow. `owner` names the store in the message (`PostgresStore`).
 * @throws TypeError for any other key.
 */
export function checkKey(owner: string, key: string, maxLength = Infinity): string {
  if (typeof key !== 'string' || key.length > maxLength || UNSTORABLE.test(key)) {
    throw new TypeError(
      maxLength === Infinity
        ? `${owner}: a key cannot hold a NUL character or a lone surrogate, got ${JSON.stringify(key)}`
        : `${owner}: a key must be a string of at most ${maxLength} characters, without a NUL or a lone surrogate, got ${JSON.stringify(key)}`,
    );
  }
  return key;
}

/**
 * Checks a lease id or a claim token (`what`, for the message): a non-empty string that a store's column
 * holds exactly, as {@link checkKey} says. `owner` names the store in the message.
 * @throws TypeError for any other value.
 */
export function checkId(owner: string, id: unknown, what: string, maxLength = Infinity): string {
  if (typeof id !== 'string' || id === '' || id.length > maxLength || UNSTORABLE.test(id)) {
    const most = maxLength === Infinity ? '' : ` of at most ${maxLength} characters`;
    throw new TypeError(
      `${owner}: ${what} must be a non-empty string${most}, without a NUL or a lone surrogate, got ${JSON.stringify(id)}`,
    );
  }
  return id;
}

/**
 * `transaction_id:state`, checked as {@link checkKey} does, split at the last `:` (a transaction id may
 * contain one; a state never does).
 * @throws TypeError for a key of another shape.
 */
export function splitKey(owner: string, key: string, maxLength = Infinity): [string, string] {
  const at = typeof key === 'string' ? checkKey(owner, key, maxLength).lastIndexOf(':') : -1;
  if (at === -1) throw new TypeError(`${owner}: a key must be transaction_id:state, got ${String(key)}`);
  return [key.slice(0, at), key.slice(at + 1)];
}

/**
 * The lease's length, checked, with its id: a non-empty string (that a `text` column, and a batch's JSON,
 * holds exactly, when `exact`: a bad one then fails its own call, never a batch it would be sent in).
 * @throws TypeError for any other lease.
 */
export function leaseMs(owner: string, lease: Lease, exact = false): number {
  if (
    typeof lease?.id !== 'string' ||
    lease.id === '' ||
    (exact && UNSTORABLE.test(lease.id)) ||
    !Number.isFinite(lease.ms) ||
    lease.ms <= 0
  ) {
    throw new TypeError(
      `${owner}: a lease must have a non-empty id${exact ? ' (no NUL character or lone surrogate)' : ''} and a positive ms, got ${JSON.stringify(lease)}`,
    );
  }
  return lease.ms;
}

/** The longest a claim of a SQL store holds its key: a century, within every dialect's range of times. */
const LONGEST_CLAIM_MS = 100 * 365 * 24 * 60 * 60 * 1000;

/**
 * A claim's `ttlMs`, checked, in whole milliseconds, at most a century (a longer one holds the key as long).
 * @throws TypeError unless `ttlMs` is a positive number.
 */
export function claimTtlMs(owner: string, ttlMs: number): number {
  if (typeof ttlMs !== 'number' || !(ttlMs > 0)) {
    throw new TypeError(
      `${owner}.claim: ttlMs must be a positive number of milliseconds, got ${String(ttlMs)}`,
    );
  }
  return Math.min(Math.ceil(ttlMs), LONGEST_CLAIM_MS);
}

/** Checks `lease()`'s `limit`: a whole number. @throws TypeError for any other. */
export function checkLeaseLimit(owner: string, limit: number): void {
  if (!Number.isInteger(limit) || limit < 0) {
    throw new TypeError(`${owner}.lease: limit must be a whole number, got ${limit}`);
  }
}

/**
 * `date`, checked: a valid `Date`. `what` names it in the message (`PostgresStore.settle: nextAttemptAt`).
 * @throws TypeError for any other value.
 */
export function validDate(what: string, date: unknown): Date {
  if (!(date instanceof Date) || Number.isNaN(date.getTime())) {
    throw new TypeError(`${what} must be a valid Date, got ${String(date)}`);
  }
  return date;
}

/** The refusal of `settle()`'s `settlement` of a status other than delivered, failed or dead. */
export function unknownSettlement(owner: string, settlement: unknown): TypeError {
  const status: unknown = Reflect.get(Object(settlement), 'status');
  return new TypeError(`${owner}.settle: status must be delivered, failed or dead, got ${String(status)}`);
}

/** `countByStatus()` from the rows of a `SELECT status, count(*) AS count ... GROUP BY status`. */
export function statusCounts(rows: unknown[]): StatusCounts {
  const counts: StatusCounts = { received: 0, delivered: 0, failed: 0, dead: 0 };
  for (const row of rows as Array<{ status: DeliveryStatus; count: number | string }>)
    counts[row.status] = Number(row.count);
  return counts;
}

/**
 * The `StoreError` of a statement that found its table missing: what to do about it, then the database's
 * own message (`database` names it: `PostgreSQL`), which names the table it looked for. `notMigrated`.
 */
export function notMigrated(
  owner: string,
  table: string,
  sql: string,
  database: string,
  error: unknown,
): StoreError {
  return new StoreError(
    `${owner}: the table ${table} does not exist: run \`await store.migrate()\` once, or create it ` +
      `with the SQL of ${sql} in your migrations (${database}: ${messageOf(error)})`,
    { cause: error, notMigrated: true },
  );
}

/** How many entries one `list()` page reads. */
const PAGE = 500;

/**
 * `DurableStore.replayDead()` of every built-in store, one rule over `list` and `replay`: the dead entries'
 * keys, oldest first, collected before any is replayed (a replay changes the status the pages select on),
 * then each replayed as `replay(key, 0, ['dead'])` does it: only if still dead, in the same write (one
 * delivered meanwhile by another instance's replay is not run again). Resolves how many were replayed. As
 * the router's bulk replay (`replayMatching({ status: 'dead' })`), one atomic step per entry.
 */
export async function replayEveryDead(store: Pick<DurableStore, 'list' | 'replay'>): Promise<number> {
  const keys: string[] = [];
  for (let offset = 0; ; offset += PAGE) {
    const page = await store.list({ status: 'dead', order: 'oldest', limit: PAGE, offset });
    keys.push(...page.map((entry) => entry.key));
    if (page.length < PAGE) break;
  }
  let replayed = 0;
  for (const key of keys) if (await store.replay(key, 0, ['dead'])) replayed += 1;
  return replayed;
}

/**
 * `DurableStore.replayWith()`'s arguments, checked alike by every built-in store: `record` an object, `from`
 * a non-empty list of statuses (an empty one would match nothing, and "any status" is never wanted here).
 * Resolves `from` joined by commas, as the SQL and Lua statements take it.
 * @throws TypeError for any other.
 */
export function checkReplayWith(owner: string, record: unknown, from: unknown): string {
  if (record === null || typeof record !== 'object' || Array.isArray(record))
    throw new TypeError(`${owner}.replayWith: record must be an object, got ${typeof record}`);
  if (
    !Array.isArray(from) ||
    from.length === 0 ||
    !from.every((status) => typeof status === 'string' && STATUSES.has(status))
  ) {
    throw new TypeError(
      `${owner}.replayWith: from must list some of ${[...STATUSES].join(', ')}, got ${JSON.stringify(from)}`,
    );
  }
  return from.join(',');
}

/**
 * A row of a SQL store's inbox, as its driver returns it: what {@link inboxEntry} reads.
 * @inline
 */
export interface InboxRow {
  key: string;
  transaction_id: string;
  state: string;
  record: unknown;
  status: DeliveryStatus;
  attempts: number | string;
  last_error: string | null;
  received_at: unknown;
  updated_at: unknown;
  next_attempt_at: unknown;
  delivered_at: unknown;
  lease_until: unknown;
}

/** How a SQL store's driver gives a row's parts: what {@link inboxEntry} needs to read them. */
export interface RowReader {
  /** The stored record as an object. */
  record(stored: unknown): Record<string, unknown>;
  /** A time as a `Date`. @default milliseconds since the epoch (a number, or its digits) */
  date?(stored: unknown): Date;
  /** The last error as text. @default the text as it is */
  lastError?(stored: string): string;
}

/** A row of a SQL store's inbox as an `InboxEntry`: camelCase, times as `Date`s, the record as an object. */
export function inboxEntry(value: unknown, read: RowReader): InboxEntry {
  const row = value as InboxRow;
  const date = (stored: unknown): Date => (read.date ? read.date(stored) : new Date(Number(stored)));
  return {
    key: String(row.key),
    transactionId: String(row.transaction_id),
    state: String(row.state),
    record: read.record(row.record),
    status: row.status,
    attempts: Number(row.attempts),
    lastError: row.last_error === null ? null : (read.lastError?.(String(row.last_error)) ?? row.last_error),
    receivedAt: date(row.received_at),
    updatedAt: date(row.updated_at),
    nextAttemptAt: date(row.next_attempt_at),
    deliveredAt: row.delivered_at === null ? null : date(row.delivered_at),
    leaseUntil: row.lease_until === null ? null : date(row.lease_until),
  };
}
