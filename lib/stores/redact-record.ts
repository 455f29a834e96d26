import { PERSONAL_FIELDS } from './store.js';

/**
 * The record with the customer's name and number blanked (`""`), or `undefined` when there was nothing to
 * blank: the one rule of `redact()` for stores that change records in JavaScript (memory, Redis). The SQL
 * stores say the same in their dialect, over the same {@link PERSONAL_FIELDS}.
 */
export function blankPersonal(record: Record<string, unknown>): Record<string, unknown> | undefined {
  if (!PERSONAL_FIELDS.some((field) => hasPersonal(record[field]))) return undefined;
  const blanked = { ...record };
  for (const field of PERSONAL_FIELDS) if (field in blanked) blanked[field] = '';
  return blanked;
}

/** Whether a field still holds something to blank: a value other than `""`, `null` or absent. */
function hasPersonal(value: unknown): boolean {
  return value !== undefined && value !== null && value !== '';
}

/**
 * Throws a `TypeError` for a programmer's slip in a call of `purge` or `redact` (`method`) of `store`: a date
 * that is no valid `Date`, a status other than `delivered` or `dead`.
 */
export function checkPurge(store: string, before: unknown, status: unknown, method = 'purge'): void {
  if (!(before instanceof Date) || Number.isNaN(before.getTime())) {
    throw new TypeError(`${store}.${method}: before must be a valid Date, got ${String(before)}`);
  }
  if (status !== 'delivered' && status !== 'dead') {
    throw new TypeError(`${store}.${method}: status must be 'delivered' or 'dead', got ${String(status)}`);
  }
}
