import {
  checkKey as checkStoredKey,
  checkId as checkStoredId,
  leaseMs as checkedLeaseMs,
  splitKey as splitStoredKey,
  inboxEntry,
  validDate,
} from '../store-core.js';
import type { InboxEntry, Lease } from '../store.js';

/** The widest key, lease id or claim token the table holds (`VARCHAR(255)`). */
const MAX_ID = 255;

/** Checks that `key` can stand in the key column exactly: at most 255 characters, no NUL, no lone surrogate. */
export const checkKey = (key: string): string => checkStoredKey('MysqlStore', key, MAX_ID);

/** `transaction_id:state`, checked and split at the last `:`. */
export const splitKey = (key: string): [string, string] => splitStoredKey('MysqlStore', key, MAX_ID);

/** Checks a lease id or a claim token: a non-empty string that fits its column. */
export const checkId = (id: unknown, what: string): string => checkStoredId('MysqlStore', id, what, MAX_ID);

/** The lease's length, checked, in whole milliseconds (at least 1). */
export function leaseMs(lease: Lease): number {
  const ms = checkedLeaseMs('MysqlStore', lease);
  checkId(lease.id, 'a lease id');
  return Math.max(1, Math.round(ms));
}

/** A `Date` as milliseconds since the epoch, checked. */
export function msOfDate(date: unknown, what: string): number {
  return validDate(`MysqlStore: ${what}`, date).getTime();
}

/** A character outside ASCII: inside a JSON string, since JSON's own syntax is all ASCII. */
const NON_ASCII = /[\u0080-\uffff]/g;

/**
 * The record as the JSON text to store, all ASCII: `JSON.stringify` escapes a NUL (`\u0000`) and a lone
 * surrogate (`\ud83d`), and every other character outside ASCII is escaped here the same way (an emoji as
 * its two `\uXXXX` halves). So the stored bytes are the same whatever the charset of the connection that
 * writes or reads them (a pool made with `charset: 'utf8'`, MySQL's 3-byte utf8mb3, would otherwise write
 * an emoji as bytes no utf8mb4 reader decodes), and `JSON.parse` gives back exactly the record. SQL's JSON
 * functions (`JSON_VALUE(record, '$.custom_data')`) read the escapes as the characters.
 */
export function toStoredJson(record: Record<string, unknown>): string {
  return JSON.stringify(record).replace(
    NON_ASCII,
    (character) => `\\u${character.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

/**
 * The record's `custom_data` as text, for the operator's search, in the form {@link asUtf8Hex} gives;
 * `null` when it has none.
 */
export function customDataOf(record: Record<string, unknown>): string | null {
  const value = record.custom_data;
  if (value === undefined || value === null) return null;
  return asUtf8Hex(typeof value === 'string' ? value : JSON.stringify(value));
}

/**
 * `text`'s UTF-8 bytes in hex, which the SQL turns back into text with `CONVERT(UNHEX(?) USING utf8mb4)`
 * ({@link UTF8_TEXT}): hex is ASCII, so the text arrives exactly whatever the connection's charset. mysql2
 * encodes a statement in the pool's charset: with `charset: 'utf8'` (MySQL's 3-byte utf8mb3) an emoji goes
 * as its two surrogate halves, 3 bytes each, which the utf8mb4 column keeps as such and no search for the
 * emoji finds; with `latin1`, as a `?`. A lone surrogate becomes U+FFFD, as mysql2 writes it anyway.
 */
export function asUtf8Hex(text: string): string {
  return Buffer.from(text, 'utf8').toString('hex');
}

/** The text of `HEX(column)` read from a utf8mb4 column: exact whatever the connection's charset. */
export function fromUtf8Hex(hex: string): string {
  return Buffer.from(hex, 'hex').toString('utf8');
}

/** The SQL of a `?` bound to {@link asUtf8Hex}'s hex: the text, in utf8mb4 (`NULL` for `NULL`). */
export const UTF8_TEXT = 'CONVERT(UNHEX(?) USING utf8mb4)';

/** At most this much of a failure's message is kept (the column holds 16 MB; a message is never that long). */
const MAX_ERROR = 10_000;

/** A failure's message as stored: cut at {@link MAX_ERROR} characters, so that the settle never fails on it. */
export function errorText(error: unknown): string {
  const text = String(error);
  return text.length > MAX_ERROR ? `${text.slice(0, MAX_ERROR)}...` : text;
}

/** A row as an `InboxEntry`; times as mysql2 gives them: milliseconds (numbers, or strings with `bigNumberStrings`). */
export const toEntry = (row: unknown): InboxEntry =>
  inboxEntry(row, { record: recordOf, lastError: fromUtf8Hex });

/** The stored record: JSON text (a `Buffer` when the pool reads text as binary), or already parsed. */
function recordOf(stored: unknown): Record<string, unknown> {
  if (typeof stored === 'string') return JSON.parse(stored) as Record<string, unknown>;
  if (Buffer.isBuffer(stored)) return JSON.parse(stored.toString('utf8')) as Record<string, unknown>;
  return stored as Record<string, unknown>;
}
