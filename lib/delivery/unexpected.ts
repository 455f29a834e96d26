import { randomUUID } from 'node:crypto';
import { messageOf, StatusRateLimitError, StoreError, TransactionNotFoundError } from '../shared/errors.js';
import { isFinalState, toRecord, type IpnNotification } from '../notification/schema.js';
import type { DurableStore } from '../stores/store.js';
import { lackingFields, type StatusRecord } from '../status/status-envelope.js';
import {
  mismatchesOf,
  type RejectedEvent,
  type StatusSource,
  type VerifiedField,
} from '../status/verify-notification.js';
import { within } from '../shared/within.js';
import { keyOf, type DeliveryContext } from './delivery-context.js';

/**
 * How long a kept unexpected notification is leased and put off (about a century): never taken up by
 * recovery, so never credited, until an operator's `replay` of its key makes it due. Leased from its first
 * write, so that a crash before it is marked kept leaves it undelivered too.
 */
const HOLD_MS = 100 * 365 * 24 * 60 * 60_000;

/** Starts the `lastError` of a kept unexpected notification: how an operator tells it apart in the inbox. */
export const UNEXPECTED_ERROR_PREFIX = 'unexpected: ';

/**
 * What became of a notification of a transaction with no expectation (option `unexpected`): `go` on as
 * usual (confirmed by the service, left to `verify`, or `accept`), `held` (kept in the inbox, answered
 * 200), `refused` (not kept: answered 503, so that the service resends it), a `duplicate` of one already
 * there, or a store failure (503).
 */
export type Screened =
  | { kind: 'go' }
  | { kind: 'held'; event: RejectedEvent }
  | { kind: 'refused'; event: RejectedEvent }
  | { kind: 'duplicate' }
  | { kind: 'store-failed'; error: StoreError };

/** What the one status query of an unexpected notification came to. */
type Confirmation =
  | { confirmed: true }
  | { confirmed: false; detail: string; status?: StatusRecord; mismatches: VerifiedField[] };

/**
 * The option `unexpected`: what becomes of a notification whose transaction has no expectation once
 * expectations are in use. `durable` is the inbox it is kept in (at least once); `statusClient` the source of
 * its one status query (time-limited), when the router has one and no `verify`.
 */
export function createUnexpectedScreen<C>(
  context: DeliveryContext<C>,
  durable: DurableStore | undefined,
  statusClient: StatusSource | undefined,
) {
  const { options } = context;

  /** One status query, never two: the record must be final, whole, and match in state, amount and custom_data. */
  async function confirm(n: IpnNotification): Promise<Confirmation> {
    if (statusClient === undefined)
      return { confirmed: false, detail: 'the router has no status client to ask', mismatches: [] };
    let status: StatusRecord;
    try {
      status = await statusClient.getStatus(n.transaction_id);
    } catch (error) {
      const detail =
        error instanceof TransactionNotFoundError
          ? 'the payment service does not know it'
          : error instanceof StatusRateLimitError
            ? `the status query was refused (over its budget, or the key blocked): ${messageOf(error)}`
            : `the status query failed: ${messageOf(error)}`;
      return { confirmed: false, detail, mismatches: [] };
    }
    if (!isFinalState(status.state))
      return { confirmed: false, detail: `the service reports ${status.state}`, status, mismatches: [] };
    const lacking = lackingFields(status);
    if (lacking.length > 0 || status.amount === null) {
      const detail = `the service's answer lacks ${lacking.length > 0 ? lacking.join(' and ') : 'amount'}`;
      return { confirmed: false, detail, status, mismatches: [] };
    }
    const mismatches = mismatchesOf(n, status);
    if (mismatches.length === 0) return { confirmed: true };
    const detail = `the service's record differs in ${mismatches.join(', ')}`;
    return { confirmed: false, detail, status, mismatches };
  }

  /** Keeps it in the inbox, leased and put off until an operator replays it; one of `held`, `duplicate`, `store-failed`. */
  async function hold(n: IpnNotification, event: RejectedEvent, inbox: DurableStore): Promise<Screened> {
    const key = keyOf(n);
    const lease = { id: randomUUID(), ms: HOLD_MS };
    const timeout = (): StoreError =>
      new StoreError(
        `the store did not keep unexpected ${key} within ${options.storeTimeoutMs} ms (storeTimeoutMs)`,
      );
    let received: boolean;
    try {
      received = await within(inbox.receive(key, toRecord(n), lease), options.storeTimeoutMs, timeout);
    } catch (cause) {
      const error =
        cause instanceof StoreError
          ? cause
          : new StoreError(`the store failed to keep unexpected ${key}: ${messageOf(cause)}`, { cause });
      return { kind: 'store-failed', error };
    }
    // Already there: kept before (the service's resend), or received and handled as expected then.
    if (!received) return { kind: 'duplicate' };
    const settlement = {
      status: 'failed' as const,
      error: `${UNEXPECTED_ERROR_PREFIX}${event.message}`,
      nextAttemptAt: new Date(Date.now() + HOLD_MS),
    };
    try {
      await within(inbox.settle(key, lease.id, settlement), options.storeTimeoutMs, timeout);
    } catch (cause) {
      // Kept all the same (received, under a lease that never ends): reported, and never credited.
      const message = `the store failed to mark unexpected ${key} as kept (it stays leased): ${messageOf(cause)}`;
      context.report(new StoreError(message, { cause }), n);
    }
    return { kind: 'held', event: { ...event, key } };
  }

  return {
    /** Screens a notification of a transaction with no expectation. Never rejects. */
    async screen(n: IpnNotification): Promise<Screened> {
      const policy = options.unexpected;
      if (policy === 'accept') return { kind: 'go' };
      // `verify` checks every notification already, this one included: credited only if confirmed.
      if (policy === 'verify' && options.verify !== undefined) return { kind: 'go' };
      let confirmation: Confirmation = {
        confirmed: false,
        detail: "no status query was made (unexpected: 'reject')",
        mismatches: [],
      };
      if (policy === 'verify') confirmation = await confirm(n);
      if (confirmation.confirmed) {
        context.logger.info(
          { transaction_id: n.transaction_id, state: n.state },
          'unexpected notification confirmed by the status query: delivered',
        );
        return { kind: 'go' };
      }
      const kept = durable
        ? 'kept in the inbox: replay its key once checked'
        : 'not kept (at most once): answered 503, so that the service resends it; ipn.expect() it once checked';
      const message =
        `the notification of ${n.transaction_id} has no expectation, while expectations are in use, and ` +
        `${confirmation.detail}: not credited, ${kept}`;
      const event: RejectedEvent = {
        reason: 'unexpected',
        message,
        mismatches: confirmation.mismatches,
        notification: n,
        ...(confirmation.status ? { status: confirmation.status } : {}),
      };
      return durable ? hold(n, event, durable) : { kind: 'refused', event };
    },
  };
}
