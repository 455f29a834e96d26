import type { InboxEntry } from '../stores/store.js';

// What the inbox's entries that need an operator's eye look like: kept unexpected notifications and
// conflicts. No import but types: the operator's page and the CLI use it too.

/**
 * How long a kept unexpected notification is leased and put off (about a century): never taken up by
 * recovery, so never credited, until the service confirms it or an operator's `replay` of its key makes it
 * due. Leased from its first write, so that a crash before it is marked kept leaves it undelivered too.
 */
export const HOLD_MS = 100 * 365 * 24 * 60 * 60_000;
/** Past this, a lease or a next attempt is a hold's (no delivery lease or retry is ever that long). */
const HELD_BEYOND_MS = HOLD_MS / 2;

/** Starts the `lastError` of a kept unexpected notification: how an operator tells it apart in the inbox. */
export const UNEXPECTED_ERROR_PREFIX = 'unexpected: ';

/** What the operator's page and `ipn-kit inbox list` show for a kept unexpected notification. */
export const KEPT_UNEXPECTED_LABEL = 'unexpected: not credited, check and replay';

/**
 * Starts the `lastError` of a kept unexpected copy the service's record contradicts (a forgery kept before
 * its transaction existed), whose hold was ended for the record to take its place (`replayWith`): left so when
 * that second write failed. A replay of its key would deliver the forgery, not the record.
 */
export const CONTRADICTED_ERROR_PREFIX = `${UNEXPECTED_ERROR_PREFIX}contradicted by the service's record`;

/** What the operator's page and `ipn-kit inbox list` show for such a copy: never replay it. */
export const KEPT_CONTRADICTED_LABEL =
  "unexpected: contradicted by the service's record, do not replay (a forgery): the sweep or ipn.reconcile() credits the record";

/**
 * Whether `entry` is an unexpected notification kept and not credited, that only an operator's `replay`
 * (or the service's confirmation) delivers: marked kept (`failed`, `lastError` starting `unexpected: `,
 * never due), or still under the hold lease it was received with (its status query still running, or a
 * crash, or a store failure, before it was marked).
 */
export function isKeptUnexpected(entry: InboxEntry, now: number = Date.now()): boolean {
  if (entry.status === 'failed')
    return (
      (entry.lastError ?? '').startsWith(UNEXPECTED_ERROR_PREFIX) &&
      entry.nextAttemptAt.getTime() - now > HELD_BEYOND_MS
    );
  return (
    entry.status === 'received' &&
    entry.leaseUntil !== null &&
    entry.leaseUntil.getTime() - now > HELD_BEYOND_MS
  );
}

/**
 * Starts the `lastError` of an inbox entry settled as a conflict (a `FAILED` after its transaction's
 * accepted `SUCCESSFUL`, kept `dead`, never emitted as `failed`): how an operator tells it apart.
 */
export const CONFLICT_PREFIX = 'conflict:';

/** What the operator's page and `ipn-kit inbox list` show for an entry kept as a conflict. */
export const CONFLICT_LABEL = 'conflict: FAILED after an accepted SUCCESSFUL, not emitted as failed';

/** Whether `entry` is kept as a conflict: `dead`, its `lastError` starting `conflict:`. */
export function isConflict(entry: InboxEntry): boolean {
  return entry.status === 'dead' && (entry.lastError ?? '').startsWith(CONFLICT_PREFIX);
}

/**
 * The label the operator's page and `ipn-kit inbox list` show beside an entry's status, for an entry that
 * is not what its status alone says: a kept unexpected notification (one the service's record contradicts,
 * left kept by a failed write of the record in its place, is labelled not to be replayed), or a conflict.
 * Else `undefined`.
 */
export function labelOf(entry: InboxEntry, now: number = Date.now()): string | undefined {
  if (isKeptUnexpected(entry, now))
    return (entry.lastError ?? '').startsWith(CONTRADICTED_ERROR_PREFIX)
      ? KEPT_CONTRADICTED_LABEL
      : KEPT_UNEXPECTED_LABEL;
  return isConflict(entry) ? CONFLICT_LABEL : undefined;
}

/**
 * Starts the `lastError` of an inbox entry whose last attempt verification could not decide (the service
 * unreachable, the status client's guard refusing, a state not final yet, a not-found not asked again),
 * retried (`failed`) or given up on (`dead`): the message of a `VerificationError`. Another failed attempt's
 * (a listener's message, which may say anything) never starts with it (see `durable-delivery.ts`).
 */
export const UNVERIFIED_PREFIX = 'could not verify the notification of ';

/**
 * Whether `entry` is unverified: `failed` or `dead` with its last attempt stopped at verification, before
 * any listener, so that making it due again (its attempts from 0) is one more retry. Not an entry whose
 * last attempt a listener failed, nor one dead because a listener ended its transaction itself or a process
 * died mid-attempt (it may hold a credit), nor a conflict, nor a kept unexpected notification.
 */
export function isUnverified(entry: InboxEntry): boolean {
  return (
    (entry.status === 'dead' || entry.status === 'failed') &&
    (entry.lastError ?? '').startsWith(UNVERIFIED_PREFIX)
  );
}
