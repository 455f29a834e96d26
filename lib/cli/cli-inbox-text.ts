/** Text in and out of `ipn-kit inbox`: its number and date options, and the table `list` prints. */
import type { InboxEntry } from '../stores/store.js';
import { labelOf } from '../delivery/kept-unexpected.js';

/** A command line that makes no sense: the command exits 2 with its usage. */
export class UsageError extends Error {}

/** The table `list` prints: one line per entry, columns padded to their widest cell. */
export function formatTable(entries: InboxEntry[]): string {
  const rows = [
    ['KEY', 'STATUS', 'ATTEMPTS', 'RECEIVED', 'NEXT ATTEMPT', 'LAST ERROR'],
    ...entries.map((entry) => [
      entry.key,
      // A kept unexpected notification (never due, delivered only by a replay after checking) and a
      // conflict (a FAILED of a paid transaction, never emitted as failed) are told apart.
      labelled(entry),
      String(entry.attempts),
      entry.receivedAt.toISOString(),
      entry.status === 'received' || entry.status === 'failed' ? entry.nextAttemptAt.toISOString() : '-',
      oneLine(entry.lastError ?? '-', 60),
    ]),
  ];
  const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => row[column]!.length)));
  return rows
    .map((row) =>
      row
        .map((cell, column) => cell.padEnd(widths[column]!))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/** An entry's status, with its label when it has one (see `labelOf`). */
function labelled(entry: InboxEntry): string {
  const label = labelOf(entry);
  return label === undefined ? entry.status : `${entry.status} (${label})`;
}

/** `text` on one line, cut at `max` characters. */
function oneLine(text: string, max: number): string {
  const flat = text.replace(/\s+/g, ' ');
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/** A whole number option of at least `min`, or a usage error. */
export function count(option: string, text: string, min: number): number {
  if (!/^\d+$/.test(text) || Number(text) < min || !Number.isSafeInteger(Number(text))) {
    throw new UsageError(`${option} must be a whole number of at least ${min}, got '${text}'`);
  }
  return Number(text);
}

/** A date, or a date and time, in ISO 8601; a time without offset is local. */
const ISO_DATE =
  /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?$/i;

/** An ISO 8601 date (or date and time) that exists on the calendar, or a usage error naming `option`. */
export function parseIsoDate(text: string, option = '--before'): Date {
  const match = ISO_DATE.exec(text.trim());
  const date = new Date(text.trim());
  if (match === null || Number.isNaN(date.getTime()) || !isOnCalendar(match)) {
    throw new UsageError(
      `${option} must be an ISO date such as 2024-05-01 or 2024-05-01T12:00:00Z, got '${text}'`,
    );
  }
  return date;
}

/** Whether the day exists in its month and the time in a day: Date rolls 2024-02-30 over to March. */
function isOnCalendar(match: RegExpExecArray): boolean {
  const [year = 0, month = 0, day = 0, hours = 0, minutes = 0, seconds = 0] = match
    .slice(1)
    .map((part) => Number(part ?? 0));
  const calendar = new Date(Date.UTC(year, month - 1, day));
  return (
    calendar.getUTCMonth() === month - 1 &&
    calendar.getUTCDate() === day &&
    hours < 24 &&
    minutes < 60 &&
    seconds < 60
  );
}
