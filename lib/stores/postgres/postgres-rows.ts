import {
  checkKey as checkStoredKey,
  checkId,
  leaseMs as checkedLeaseMs,
  splitKey as splitStoredKey,
  inboxEntry,
  unknownSettlement,
  validDate,
} from '../store-core.js';
import type { InboxSql } from './postgres-sql.js';
import type { InboxEntry, Lease, Settlement } from '../store.js';

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
      const next = validDate('PostgresStore.settle: nextAttemptAt', settlement.nextAttemptAt);
      return [sql.failed, [key, leaseId, String(settlement.error), next]];
    }
    case 'dead':
      return [sql.dead, [key, leaseId, String(settlement.error)]];
    default:
      throw unknownSettlement('PostgresStore', settlement);
  }
}

/** Checks that `key` can stand in a `text` column exactly (see `checkKey` of store-checks.ts). */
export const checkKey = (key: string): string => checkStoredKey('PostgresStore', key);

/** `transaction_id:state`, checked and split at the last `:`. */
export const splitKey = (key: string): [string, string] => splitStoredKey('PostgresStore', key);

/** A claim token, checked: a non-empty string a `text` column holds exactly (and a literal can carry). */
export const checkToken = (token: unknown): string => checkId('PostgresStore', token, 'a claim token');

/** The lease's length, checked, with an id a `text` column (and a batch's JSON) holds exactly. */
export const leaseMs = (lease: Lease): number => checkedLeaseMs('PostgresStore', lease, true);

/** A row as an `InboxEntry`; times as `pg` gives them (a `Date`, or text for pools with custom type parsers). */
export const toEntry = (row: unknown): InboxEntry =>
  inboxEntry(row, {
    record: (stored) => fromStoredJson(typeof stored === 'string' ? JSON.parse(stored) : stored),
    date: (stored) => (stored instanceof Date ? stored : new Date(stored as string)),
  });

/**
 * The key of a record stored as JSON text. A notification always has `transaction_id` and `state`, so a
 * stored record whose only key is this one is such a wrapper, and nothing else: the encoding is unambiguous,
 * rows written before it existed included.
 */
export const AS_TEXT = 'ipn-kit:json';

/**
 * The same in JSON text as `JSON.stringify` writes it: the escape of a NUL (`\u0000`) or of a lone surrogate
 * (`\ud800` to `\udfff`: a whole pair it writes as the character itself), not preceded by an escaped
 * backslash (`\\u0000` is a backslash, then `u0000`).
 */
const UNSTORABLE_ESCAPE = /(?<!\\)(?:\\\\)*\\u(?:0000|d[89a-f])/;

/**
 * The JSON to store in the `jsonb` column. A record holding a string `jsonb` refuses is stored as its JSON
 * text (where `JSON.stringify` escapes such characters as `\u0000`, `\ud83d`) inside `{"ipn-kit:json": ...}`,
 * so that it round-trips exactly; every other record is stored as itself, searchable as before. Decided on
 * the text `jsonb` is given, which holds a `\u` only where a string did (almost never): the text is searched
 * only then.
 */
export function toStoredJson(record: Record<string, unknown>): string {
  const text = JSON.stringify(record);
  return text.includes('\\u') && UNSTORABLE_ESCAPE.test(text) ? JSON.stringify({ [AS_TEXT]: text }) : text;
}

/** The record a stored `jsonb` value holds: the inverse of {@link toStoredJson}. */
export function fromStoredJson(stored: unknown): Record<string, unknown> {
  const record = stored as Record<string, unknown>;
  if (typeof record === 'object' && record !== null) {
    const keys = Object.keys(record);
    const text = record[AS_TEXT];
    if (keys.length === 1 && typeof text === 'string') return JSON.parse(text) as Record<string, unknown>;
  }
  return record;
}
