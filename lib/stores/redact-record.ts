import { PERSONAL_FIELDS } from './store.js';
import { validDate } from './store-core.js';

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
  validDate(`${store}.${method}: before`, before);
  if (status !== 'delivered' && status !== 'dead') {
    throw new TypeError(`${store}.${method}: status must be 'delivered' or 'dead', got ${String(status)}`);
  }
}

/**
 * `redact()` for the stores that change records in JavaScript: each candidate (a delivered or dead entry
 * received before the date, its record as stored) is blanked by {@link blankPersonal}, then written by `set`
 * only if its stored text is still `stored` (a replace meanwhile keeps the new record) and it is still delivered
 * or dead (a replay meanwhile made it due again: what is still to deliver keeps its record whole). Resolves how
 * many records changed.
 */
export async function redactEach(
  candidates: Array<{ key: string; stored: string }>,
  serialize: (record: Record<string, unknown>) => string,
  set: (key: string, stored: string, blanked: string) => Promise<boolean>,
): Promise<number> {
  let count = 0;
  for (const { key, stored } of candidates) {
    const blanked = blankPersonal(JSON.parse(stored) as Record<string, unknown>);
    if (blanked !== undefined && (await set(key, stored, serialize(blanked)))) count += 1;
  }
  return count;
}
