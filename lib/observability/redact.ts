import { messageOf, type IpnKitError } from '../shared/errors.js';

/** The fields that identify the customer: never written to a log in clear unless `logCustomerData` is on. */
export const CUSTOMER_FIELDS = ['destination', 'customer_name'] as const;

const REDACTED = '[redacted]';

/** Fields of a driver's error worth logging (PostgreSQL's), scrubbed like the message; the rest is left out. */
const DRIVER_FIELDS = ['detail', 'hint', 'where'] as const;

/**
 * What a log line may say of an error raised while handling `notification`: its name, code, message,
 * PostgreSQL's `detail`, `hint` and `where`, and stack, with the customer's number and name replaced wherever they appear (a listener's own message may
 * quote them), and the same for its cause. The error itself, which the `error` event carries, is untouched.
 */
export function loggableError(error: IpnKitError, notification: unknown): Record<string, unknown> {
  const values = customerValues(notification);
  const scrub = (text: unknown): unknown => {
    if (typeof text !== 'string') return text === undefined ? undefined : scrub(messageOf(text));
    return scrubbed(text, values);
  };
  // A listener may throw anything: each property is read on its own, and a getter that throws is skipped.
  const read = (value: object, key: string): unknown => {
    try {
      return (value as Record<string, unknown>)[key];
    } catch {
      return undefined;
    }
  };
  const describe = (value: unknown, depth: number, outer?: string): unknown => {
    if (!isError(value)) {
      if (typeof value === 'string') return scrub(value);
      // Anything else is shown as text: an object may hold the customer's details, or throw when printed.
      return typeof value === 'object' || typeof value === 'symbol' ? scrub(messageOf(value)) : value;
    }
    const cause = read(value, 'cause');
    const code = read(value, 'code');
    // A database driver's own fields (pg's `detail`: "Failing row contains (...)") may quote the record.
    const extra = Object.fromEntries(
      DRIVER_FIELDS.map((field) => [field, read(value, field)])
        .filter((entry): entry is [string, string] => typeof entry[1] === 'string')
        .map(([field, text]) => [field, scrub(text)]),
    );
    const message = scrub(messageOf(value)) as string;
    return {
      type: scrub(read(value, 'name')),
      code: typeof code === 'string' ? code : undefined,
      // A cause whose message the error's own already quotes (a listener's throw, wrapped twice) says it once.
      message: outer?.includes(message) === true ? undefined : message,
      ...extra,
      stack: scrub(read(value, 'stack')),
      // A cause chain may loop (a.cause = b, b.cause = a): a few levels say enough.
      cause: cause === undefined || depth >= MAX_CAUSES ? undefined : describe(cause, depth + 1, message),
    };
  };
  return describe(error, 0) as Record<string, unknown>;
}

const MAX_CAUSES = 8;

/** `instanceof Error`, which a Proxy can make throw. */
function isError(value: unknown): value is Error {
  try {
    return value instanceof Error;
  } catch {
    return false;
  }
}

/** `text` with the customer's number and name (those of `notification`) replaced by `[redacted]`. */
export function redactText(text: string, notification: unknown): string {
  return scrubbed(text, customerValues(notification));
}

function scrubbed(text: string, values: readonly string[]): string {
  return values.reduce((result, value) => result.split(value).join(REDACTED), text);
}

/** Where an event's payload may hold a notification: itself, or one of these fields (`error`, `rejected`, `dead`, `invalid`). */
const HOLDERS = ['notification', 'status', 'received'] as const;

/** The customer's number and name in a payload: the texts to scrub (ignoring ones too short to matter). */
function customerValues(payload: unknown): string[] {
  if (typeof payload !== 'object' || payload === null) return [];
  const record = payload as Record<string, unknown>;
  const records = [record, ...HOLDERS.map((field) => record[field])];
  return records.flatMap((item) =>
    typeof item === 'object' && item !== null
      ? CUSTOMER_FIELDS.map((field) => (item as Record<string, unknown>)[field]).filter(
          (value): value is string => typeof value === 'string' && value.trim().length >= 3,
        )
      : [],
  );
}
