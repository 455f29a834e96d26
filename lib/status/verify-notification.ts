import { StatusRateLimitError, TransactionNotFoundError } from '../shared/errors.js';
import { isFinalState, type IpnNotification } from '../notification/schema.js';
import { monotonicNow } from '../shared/clock.js';
import type { StatusQueryOptions } from './query-guard.js';
import { lackingFields, type StatusRecord } from './status-envelope.js';

/**
 * What `verify` needs of a status client: `createStatusClient()` gives one. A source of your own may ignore
 * `options`; then a not-found or contradicting answer is simply asked for again on the next attempt.
 */
export interface StatusSource {
  /** The service's record of `transactionId`; rejects with `TransactionNotFoundError` when it has none. */
  getStatus(transactionId: string, options?: StatusQueryOptions): Promise<StatusRecord>;
  /** With several API keys: the accounts it holds keys for (`createStatusClient({ apiKeys })` says). */
  readonly accounts?: readonly string[];
}

/** What a verification attempt knows of the notification's history, on the status client's clock. */
export interface VerifyContext {
  /** When the notification arrived (or this attempt began): an answer older than it never condemns it. */
  arrivedAt: number;
  /** When the service first said it does not know the transaction: a not-found is believed once repeated after it. */
  notFoundAt?: number | undefined;
  /**
   * The account the router's `accountOf` names, a guess: passed on as `accountGuess` (the expectation's
   * account, when there is one, wins over it).
   */
  account?: string | undefined;
  /**
   * A non-final answer older than `arrivedAt` is asked for again too (`since`, within the guard's rules), as
   * a not-found is, so that a copy is never given up (`dead` at least once, `not_final` at most once) on a
   * non-final answer cached before it arrived or its attempt began: at least once, a copy that made a dead
   * entry due again; at most once, the genuine copy that came after a forgery of its pending transaction
   * cached PENDING. It is then verified on a newer answer, its wait the guard's `retryAfterMs` (a refusal is
   * a `later` with no `pending`: given up on it, the copy is reported, never rejected `not_final`).
   */
  freshPending?: boolean;
}

/** The fields a notification must share with the service's own record to be believed. */
export type VerifiedField = 'state' | 'amount' | 'custom_data';

/**
 * Why a notification was not believed.
 * @inline
 */
export type RejectionReason =
  /** The service does not know the transaction: a forged id. */
  | 'not_found'
  /** The service's record differs in state, amount or `custom_data`. */
  | 'mismatch'
  /** The service still reports a non-final state after every verification attempt. */
  | 'not_final'
  /**
   * Expectations are in use and none is kept for its transaction, and nothing confirmed it (option
   * `unexpected`): not credited, and kept (at least once: in the inbox, for a `replay` after checking).
   */
  | 'unexpected';

/** Payload of the `rejected` event: a notification the status query contradicts. Never credited. */
export interface RejectedEvent {
  reason: RejectionReason;
  message: string;
  /** The fields that differ (for `mismatch`, and `unexpected` when the status query found any; `state` for `not_final`). */
  mismatches: readonly VerifiedField[];
  /** What was posted to the IPN address. */
  notification: IpnNotification;
  /** What the status query answered, when it found the transaction. */
  status?: StatusRecord;
  /**
   * For `unexpected`, at least once: its inbox key, for `ipn.inbox.replay(key, ['failed'])` once checked (`['failed']`: only while it is still kept, for the sweep may have credited it since). Absent when
   * it was not kept (at most once: answered 503, so that the service resends it).
   */
  key?: string;
}

/** The outcome of one verification attempt. */
export type Verdict =
  | { kind: 'confirmed'; status: StatusRecord }
  | { kind: 'rejected'; event: RejectedEvent }
  /**
   * Not decided now: the service is unreachable, the budget is spent, the state is not final yet, the answer
   * lacks a field the comparison needs, or a not-found waits to be repeated (`notFoundAt`).
   */
  | { kind: 'later'; reason: unknown; retryAfterMs: number; pending?: StatusRecord; notFoundAt?: number };

/**
 * The longest wait a refused status query's `retryAfterMs` sets before the next verification attempt: a day,
 * the longest `Retry-After` the status client itself obeys (`MAX_RETRY_AFTER` in `status-client.ts`), so that
 * no wait of the built-in client's guard is cut short (an attempt before it is refused again, and spends one
 * of the attempts on a query never sent), while a custom source's larger one (a typo, seconds taken for ms)
 * cannot put verification off for weeks, nor past the largest date (an invalid `nextAttemptAt`).
 */
const MAX_RETRY_AFTER_MS = 24 * 60 * 60_000;

/**
 * Past a refusal's wait, how much longer the retry waits: the guard measures its wait on the monotonic clock
 * (`monotonicNow()`, fractional), the retry is due by the wall clock (`Date.now()`, or the database's, in
 * whole milliseconds) and a timer may fire a millisecond early; a retry due at the wait to the millisecond
 * was refused again, an attempt spent on a query never sent (two attempts: dead, the payment not credited).
 */
const RETRY_AFTER_MARGIN_MS = 25;

/**
 * A refusal's `retryAfterMs` as verification waits for it, read once here for the at-least-once retries, the
 * at-most-once queue and the sweep alike, in whole milliseconds: one that is not a finite number of at least
 * 0 (`NaN`, `Infinity`, negative, from a custom source) is 0, the retry's usual backoff; a wait is rounded
 * up and {@link RETRY_AFTER_MARGIN_MS} added, so that the retry is not refused again; one over
 * {@link MAX_RETRY_AFTER_MS} is that.
 */
export function retryWaitOf(error: StatusRateLimitError): number {
  const ms: unknown = error.retryAfterMs;
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms <= 0) return 0;
  return Math.min(Math.ceil(ms) + RETRY_AFTER_MARGIN_MS, MAX_RETRY_AFTER_MS);
}

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
 * deliver in the forgery's place, but only when that record is whole (it carries the state, the amount and
 * `custom_data`): a partial record is never credited. Otherwise `undefined`.
 */
export function genuineRecord(event: RejectedEvent): StatusRecord | undefined {
  const { status } = event;
  return event.reason === 'mismatch' &&
    status !== undefined &&
    status.state === event.notification.state &&
    isFinalState(status.state) &&
    typeof status.amount === 'number' &&
    lackingFields(status).length === 0
    ? status
    : undefined;
}

type Answer = { record: StatusRecord } | { notFound: TransactionNotFoundError } | { error: unknown };

async function answerOf(source: StatusSource, id: string, since?: number, account?: string): Promise<Answer> {
  try {
    const options = {
      ...(since === undefined ? {} : { since }),
      ...(account === undefined ? {} : { accountGuess: account }),
    };
    return {
      record: await (Object.keys(options).length === 0
        ? source.getStatus(id)
        : source.getStatus(id, options)),
    };
  } catch (error) {
    return error instanceof TransactionNotFoundError ? { notFound: error } : { error };
  }
}

/**
 * Whether an answer would wrongly condemn the notification if it were stale: not found (the transaction may
 * be younger than the answer), or FAILED for a notification that says SUCCESSFUL (a late operator
 * confirmation moves a transaction from FAILED to SUCCESSFUL). Such an answer is asked for again when it
 * is older than the notification. Any other difference is final: a paid transaction does not become
 * FAILED, nor change its amount or `custom_data`, so a forged copy of it is rejected at once, at no cost.
 */
function mayBeStale(answer: Answer, n: IpnNotification): boolean {
  if ('notFound' in answer) return true;
  if (!('record' in answer)) return false;
  const { record } = answer;
  return record.state === 'FAILED' && n.state === 'SUCCESSFUL' && lackingFields(record).length === 0;
}

/**
 * Asks the service (through the client's guard) whether the notification is true: the state, the amount and
 * `custom_data` must match its own record. Nothing is decided on a guess:
 *
 * - an answer that lacks the amount or `custom_data` (a partial record) can neither confirm nor contradict:
 *   `later`, like an unreachable service;
 * - an answer that may be stale (not found, or FAILED for a SUCCESSFUL notification) is used only when it is
 *   newer than the notification (`context.arrivedAt`): a cached one is asked again, within the guard's
 *   rules (a FAILED that became SUCCESSFUL, an id a forger asked about before it existed);
 * - a not-found is believed only when the service says it again after `context.notFoundAt`: the first one
 *   is `later` (with `notFoundAt`), in case the service's replicas lag.
 */
export async function verifyNotification(
  source: StatusSource,
  notification: IpnNotification,
  context: VerifyContext = { arrivedAt: -Infinity },
): Promise<Verdict> {
  const id = notification.transaction_id;
  const { account } = context;
  let answer = await answerOf(source, id, undefined, account);
  const pendingStale =
    context.freshPending === true && 'record' in answer && !isFinalState(answer.record.state);
  if (pendingStale || mayBeStale(answer, notification)) {
    const since =
      'notFound' in answer && context.notFoundAt !== undefined ? context.notFoundAt : context.arrivedAt;
    if (Number.isFinite(since)) answer = await answerOf(source, id, since, account);
  }
  const notFoundAt = context.notFoundAt;
  if ('notFound' in answer) {
    if (notFoundAt === undefined) {
      const reason = `the payment service does not know transaction ${id} yet: asking once more before rejecting it`;
      return { kind: 'later', reason, retryAfterMs: 0, notFoundAt: monotonicNow() };
    }
    const message =
      `the payment service does not know transaction ${id}, twice: the notification is forged, or the ` +
      "status client's apiKey or baseUrl is wrong (an id created under another API key is not found either)";
    return { kind: 'rejected', event: { reason: 'not_found', message, mismatches: [], notification } };
  }
  if ('error' in answer) {
    const { error } = answer;
    const retryAfterMs = error instanceof StatusRateLimitError ? retryWaitOf(error) : 0;
    // A bug in a custom source is not a reason to believe the notification either: try later, then report.
    return {
      kind: 'later',
      reason: error,
      retryAfterMs,
      ...(notFoundAt === undefined ? {} : { notFoundAt }),
    };
  }
  const status = answer.record;
  if (!isFinalState(status.state)) {
    return { kind: 'later', reason: `the service reports ${status.state}`, retryAfterMs: 0, pending: status };
  }
  const lacking = lackingFields(status);
  if (lacking.length > 0 || status.amount === null) {
    const fields = lacking.length > 0 ? lacking.join(' and ') : 'amount';
    return {
      kind: 'later',
      reason: `the service's answer for ${id} lacks ${fields}: it can neither confirm nor contradict the notification`,
      retryAfterMs: 0,
    };
  }
  const mismatches = mismatchesOf(notification, status);
  if (mismatches.length === 0) return { kind: 'confirmed', status };
  const message = `the notification of ${id} differs from the service's record in ${mismatches.join(', ')}`;
  return { kind: 'rejected', event: { reason: 'mismatch', message, mismatches, notification, status } };
}
