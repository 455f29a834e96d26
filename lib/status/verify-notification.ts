import { StatusRateLimitError, TransactionNotFoundError } from '../pipeline/errors.js';
import { isFinalState, type IpnNotification } from '../pipeline/schema.js';
import type { StatusRecord } from './status-envelope.js';

/** What `verify` needs of a status client: `createStatusClient()` gives one. */
export interface StatusSource {
  /** The service's record of `transactionId`; rejects with `TransactionNotFoundError` when it has none. */
  getStatus(transactionId: string): Promise<StatusRecord>;
}

/** The fields a notification must share with the service's own record to be believed. */
export type VerifiedField = 'state' | 'amount' | 'custom_data';

/** Why a notification was not believed. */
export type RejectionReason =
  /** The service does not know the transaction: a forged id. */
  | 'not_found'
  /** The service's record differs in state, amount or `custom_data`. */
  | 'mismatch'
  /** The service still reports a non-final state after every verification attempt. */
  | 'not_final';

/** Payload of the `rejected` event: a notification the status query contradicts. Never credited. */
export interface RejectedEvent {
  reason: RejectionReason;
  message: string;
  /** The fields that differ (for `mismatch`; `state` for `not_final`). */
  mismatches: readonly VerifiedField[];
  /** What was posted to the IPN address. */
  notification: IpnNotification;
  /** What the status query answered, when it found the transaction. */
  status?: StatusRecord;
}

/** The outcome of one verification attempt. */
export type Verdict =
  | { kind: 'confirmed'; status: StatusRecord }
  | { kind: 'rejected'; event: RejectedEvent }
  /** Not decided now (the service is unreachable, the budget is spent, or the state is not final yet). */
  | { kind: 'later'; reason: unknown; retryAfterMs: number; pending?: StatusRecord };

/** The fields where the notification and the service's record disagree. */
export function mismatchesOf(notification: IpnNotification, status: StatusRecord): VerifiedField[] {
  const fields: VerifiedField[] = [];
  if (status.state !== notification.state) fields.push('state');
  if (status.amount !== notification.amount) fields.push('amount');
  if (!sameCustomData(status.custom_data, notification.custom_data)) fields.push('custom_data');
  return fields;
}

/**
 * `custom_data` as the partner gave it: the same text, or, when both are JSON (the service may re-serialise
 * what it decoded: `{"a": 1}` and `{"a":1}`, `12.50` and `12.5`), the same JSON value.
 */
export function sameCustomData(a: string, b: string): boolean {
  if (a === b) return true;
  const left = canonicalJson(a);
  return left !== undefined && left === canonicalJson(b);
}

/**
 * JSON text with object keys sorted, or `undefined` when `text` is not JSON, or holds a number too long to be
 * read exactly (two different 20-digit order numbers must never compare equal).
 */
function canonicalJson(text: string): string | undefined {
  if (/\d{16,}/.test(text)) return undefined;
  try {
    return JSON.stringify(JSON.parse(text), (_key, value: unknown) =>
      typeof value === 'object' && value !== null && !Array.isArray(value)
        ? Object.fromEntries(Object.entries(value).sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0)))
        : value,
    );
  } catch {
    return undefined;
  }
}

/**
 * When a rejected notification names a transaction that did end in its state (only the amount or
 * `custom_data` were altered), the genuine notification of that key exists: the service's own record, to
 * deliver in the forgery's place. Otherwise `undefined`.
 */
export function genuineRecord(event: RejectedEvent): StatusRecord | undefined {
  const { status } = event;
  return event.reason === 'mismatch' && status !== undefined && status.state === event.notification.state
    ? status
    : undefined;
}

/**
 * Asks the service (through the client's guard) whether the notification is true: the state, the amount and
 * `custom_data` must match its own record. A field the answer left out counts as a difference: nothing is
 * credited on a guess.
 */
export async function verifyNotification(
  source: StatusSource,
  notification: IpnNotification,
): Promise<Verdict> {
  const id = notification.transaction_id;
  let status: StatusRecord;
  try {
    status = await source.getStatus(id);
  } catch (error) {
    if (error instanceof TransactionNotFoundError) {
      const message = `the payment service does not know transaction ${id}: the notification is forged`;
      return { kind: 'rejected', event: { reason: 'not_found', message, mismatches: [], notification } };
    }
    const retryAfterMs = error instanceof StatusRateLimitError ? error.retryAfterMs : 0;
    // A bug in a custom source is not a reason to believe the notification either: try later, then report.
    return { kind: 'later', reason: error, retryAfterMs };
  }
  if (!isFinalState(status.state)) {
    return { kind: 'later', reason: `the service reports ${status.state}`, retryAfterMs: 0, pending: status };
  }
  const mismatches = mismatchesOf(notification, status);
  if (mismatches.length === 0) return { kind: 'confirmed', status };
  const message = `the notification of ${id} differs from the service's record in ${mismatches.join(', ')}`;
  return { kind: 'rejected', event: { reason: 'mismatch', message, mismatches, notification, status } };
}
