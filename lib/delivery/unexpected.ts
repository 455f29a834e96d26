import { createHash } from 'node:crypto';
import { messageOf, StatusRateLimitError, StoreError, TransactionNotFoundError } from '../shared/errors.js';
import { isFinalState, toRecord, type IpnNotification } from '../notification/schema.js';
import type { DurableStore } from '../stores/store.js';
import { CONTRADICTED_ERROR_PREFIX, HOLD_MS, UNEXPECTED_ERROR_PREFIX } from './kept-unexpected.js';
import { lackingFields, type StatusRecord } from '../status/status-envelope.js';
import {
  mismatchesOf,
  type RejectedEvent,
  type StatusSource,
  type VerifiedField,
} from '../status/verify-notification.js';
import { within } from '../shared/within.js';
import { keyOf, type DeliveryContext } from './delivery-context.js';
import { accountOfNotification } from './accounts.js';

/**
 * The lease id a kept unexpected notification is received under: derived from its key (shaped as a UUID),
 * so that whoever makes it due later (the service's confirmation, an operator's `replay`, on any instance,
 * after a crash) can end that lease through the store's lease guard, and nothing else can.
 */
export function holdLeaseId(key: string): string {
  const hex = createHash('sha256').update(`ipn-kit:unexpected-hold:${key}`).digest('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-8${hex.slice(13, 16)}-a${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

/**
 * An operator's replay of `key` in `store`, when it is a kept unexpected notification still under its hold
 * lease (a crash between its two writes, or before its status query answered): that lease ended, so that the
 * store's `replay` makes it due (a replay keeps a live lease, and this one runs for a hundred years). Only
 * the hold lease: a delivery's live lease is never broken. Resolves whether it ended one.
 *
 * With `due` false (the service's record contradicts the copy, and is to take its place by `replayWith`),
 * the hold ends into a kept copy instead, never due: the copy is never delivered between the two writes,
 * nor after them when the second one fails.
 */
export function endHold(store: DurableStore, key: string, due = true): Promise<boolean> {
  return store.settle(key, holdLeaseId(key), {
    status: 'failed',
    error: due
      ? `${UNEXPECTED_ERROR_PREFIX}replayed by an operator`
      : `${CONTRADICTED_ERROR_PREFIX}, which takes its place: do not replay this copy (a replay delivers it, the forgery, not the record); the sweep or ipn.reconcile() of its transaction puts the record in its place`,
    nextAttemptAt: new Date(due ? Date.now() : Date.now() + HOLD_MS),
  });
}

/**
 * What became of a notification of a transaction with no expectation (option `unexpected`): `go` on as
 * usual (confirmed by the service, left to `verify`, or `accept`), `held` (kept in the inbox, answered 200;
 * `after` is the work after the answer: the one status query, then the entry made due or `rejected`),
 * `refused` (not kept: answered 503, so that the service resends it), a `duplicate` of one already there,
 * or a store failure (503). At least once, `unconfirmed`: its key is held by a kept unexpected copy whose
 * record differs, and nothing confirmed this one (answered 503 with its `rejected` event, never kept: the
 * service resends it; see {@link createUnexpectedScreen}'s `recheck`).
 */
export type Screened =
  | { kind: 'go' }
  | { kind: 'held'; after: () => Promise<void> }
  | { kind: 'refused'; event: RejectedEvent }
  | { kind: 'unconfirmed'; event: RejectedEvent }
  | { kind: 'duplicate' }
  | { kind: 'store-failed'; error: StoreError };

/** What the one status query of an unexpected notification came to. */
type Confirmation =
  | { confirmed: true; status: StatusRecord }
  | { confirmed: false; detail: string; status?: StatusRecord; mismatches: VerifiedField[] };

/**
 * The option `unexpected`: what becomes of a notification whose transaction has no expectation once
 * expectations are in use. `durable` is the inbox it is kept in (at least once); `statusClient` the source of
 * its one status query (time-limited: after the answer at least once, before it, briefly, at most once),
 * when the router has one and no `verify`; `due` is called once a confirmed one was made due (recovery).
 */
export function createUnexpectedScreen<C>(
  context: DeliveryContext<C>,
  durable: DurableStore | undefined,
  statusClient: StatusSource | undefined,
  due: () => void,
) {
  const { options } = context;
  const storeError = (what: string, key: string) => (cause: unknown) =>
    cause instanceof StoreError
      ? cause
      : new StoreError(`the store failed to ${what} unexpected ${key}: ${messageOf(cause)}`, { cause });
  const timed = <T>(pending: Promise<T>, what: string, key: string): Promise<T> =>
    within(pending, options.storeTimeoutMs, () => {
      return new StoreError(
        `the store did not ${what} unexpected ${key} within ${options.storeTimeoutMs} ms (storeTimeoutMs)`,
      );
    });

  /** One status query, never two: the record must be final, whole, and match in state, amount and custom_data. */
  async function confirm(n: IpnNotification): Promise<Confirmation> {
    if (statusClient === undefined)
      return { confirmed: false, detail: 'the router has no status client to ask', mismatches: [] };
    let status: StatusRecord;
    try {
      const account = accountOfNotification(options.accountOf, n, context.logger);
      status = await (account === undefined
        ? statusClient.getStatus(n.transaction_id)
        : statusClient.getStatus(n.transaction_id, { accountGuess: account }));
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
    if (mismatches.length === 0) return { confirmed: true, status };
    const detail = `the service's record differs in ${mismatches.join(', ')}`;
    return { confirmed: false, detail, status, mismatches };
  }

  /** The `rejected` event of one nothing confirmed; `fate`, what became of it, when not the usual. */
  function rejection(
    n: IpnNotification,
    confirmation: Confirmation & { confirmed: false },
    fate?: string,
  ): RejectedEvent {
    const kept = durable
      ? "kept in the inbox: once checked, ipn.inbox.replay(key, ['failed']) (only while it is still kept: the sweep may have credited it since)"
      : 'not kept (at most once): answered 503, so that the service resends it; ipn.expect() it once checked';
    const message =
      `the notification of ${n.transaction_id} has no expectation, while expectations are in use, and ` +
      `${confirmation.detail}: ${fate ?? `not credited, ${kept}`}`;
    return {
      reason: 'unexpected',
      message,
      mismatches: confirmation.mismatches,
      notification: n,
      ...(confirmation.status ? { status: confirmation.status } : {}),
      ...(durable ? { key: keyOf(n) } : {}),
    };
  }

  /** The `lastError` of a kept unexpected notification, saying why it is kept. */
  const keptError = (n: IpnNotification, note: string): string =>
    `${UNEXPECTED_ERROR_PREFIX}the notification of ${n.transaction_id} has no expectation, while expectations are in use: ${note}`;

  /**
   * Keeps it in the inbox, under its hold lease; then, given a `note` (why), marks it kept (`failed`,
   * never due, `lastError` starting `unexpected: `); one of `held`, `duplicate`, `store-failed`. A failure of
   * the second write leaves it under the hold lease: never credited, made due by a `replay` of its key.
   * Without a note (its status query is still to come), it stays under the hold lease until the query's
   * answer ends it: see {@link settleHeld}.
   */
  async function hold(
    n: IpnNotification,
    inbox: DurableStore,
    then: () => Promise<void>,
    note?: string,
  ): Promise<Screened> {
    const key = keyOf(n);
    const lease = { id: holdLeaseId(key), ms: HOLD_MS };
    let received: boolean;
    try {
      received = await timed(Promise.resolve(inbox.receive(key, toRecord(n), lease)), 'keep', key);
    } catch (cause) {
      return { kind: 'store-failed', error: storeError('keep', key)(cause) };
    }
    // Already there: kept before (the service's resend), or received and handled as expected then.
    if (!received) return { kind: 'duplicate' };
    if (note === undefined) return { kind: 'held', after: then };
    const settlement = {
      status: 'failed' as const,
      error: keptError(n, note),
      nextAttemptAt: new Date(Date.now() + HOLD_MS),
    };
    try {
      await timed(Promise.resolve(inbox.settle(key, lease.id, settlement)), 'mark as kept', key);
    } catch (cause) {
      // Kept all the same (received, under its hold lease): reported, never credited, made due by a replay.
      const message = `the store failed to mark unexpected ${key} as kept (it stays under its hold lease, until a replay of its key): ${messageOf(cause)}`;
      context.report(new StoreError(message, { cause }), n);
    }
    return { kind: 'held', after: then };
  }

  /**
   * At least once, after the 200: the one status query, then one write through the hold lease (the store's
   * lease guard: atomic, across instances): confirmed, the entry is made due and delivered by recovery,
   * once; otherwise it is marked kept and `rejected`. An operator's `replay` of its key while the query runs
   * ends the same hold lease first: then the answer changes nothing, and the entry is delivered once, by the
   * replay. Never rejects.
   */
  async function settleHeld(n: IpnNotification, inbox: DurableStore): Promise<void> {
    const confirmation = await confirm(n);
    const key = keyOf(n);
    const { confirmed } = confirmation;
    const settlement = {
      status: 'failed' as const,
      error: confirmed
        ? `${UNEXPECTED_ERROR_PREFIX}confirmed by the status query: released for delivery`
        : keptError(
            n,
            `${confirmation.detail}; kept and not credited; once checked, ipn.inbox.replay(key, ['failed'])`,
          ),
      nextAttemptAt: new Date(confirmed ? Date.now() : Date.now() + HOLD_MS),
    };
    const what = confirmed ? 'make due' : 'mark as kept';
    let ended: boolean;
    try {
      ended = await timed(Promise.resolve(inbox.settle(key, holdLeaseId(key), settlement)), what, key);
    } catch (cause) {
      const error = storeError(what, key)(cause);
      const message = confirmed
        ? `the service confirmed unexpected ${key}, but ${messageOf(error)}: it stays kept, replay its key`
        : `${messageOf(error)}: it stays kept under its hold lease, until a replay of its key`;
      context.report(new StoreError(message, { cause }), n);
      if (!confirmed) context.reject(rejection(n, confirmation));
      return;
    }
    if (!ended) {
      // Its hold was ended first: by an operator's replay (which delivers it, once), or by the sweep or
      // ipn.reconcile() on the service's record (which confirmed it, or, contradicting it, took its place).
      context.logger.info(
        { transaction_id: n.transaction_id, state: n.state },
        "unexpected notification's hold ended while its status query ran (an operator's replay of its key, or the service's record found by the sweep or ipn.reconcile()): left to that",
      );
      // A copy the service's record contradicts is said, as it would have been had the query answered first:
      // a forgery replaced by the record had no `rejected` event at all (the record's confirmation cannot
      // contradict it, so a copy that is credited as it came is never called rejected here).
      if (!confirmation.confirmed && confirmation.mismatches.length > 0) {
        const fate =
          "its hold was ended meanwhile: an operator's replay of its key delivers it as it came; the sweep or " +
          "ipn.reconcile() put the service's record in its place";
        context.reject(rejection(n, confirmation, fate));
      }
      return;
    }
    if (!confirmation.confirmed) return context.reject(rejection(n, confirmation));
    context.logger.info(
      { transaction_id: n.transaction_id, state: n.state },
      'unexpected notification confirmed by the status query: delivered',
    );
    due();
  }

  return {
    /** Screens a notification of a transaction with no expectation. Never rejects. */
    async screen(n: IpnNotification): Promise<Screened> {
      const policy = options.unexpected;
      if (policy === 'accept') return { kind: 'go' };
      // `verify` checks every notification already, this one included: credited only if confirmed.
      if (policy === 'verify' && options.verify !== undefined) return { kind: 'go' };
      const asking = policy === 'verify' && statusClient !== undefined;
      if (durable) {
        // Kept first, answered 200 at once: the status query is the work after the answer.
        if (asking) return hold(n, durable, () => settleHeld(n, durable));
        const confirmation: Confirmation = {
          confirmed: false,
          detail:
            policy === 'verify'
              ? 'the router has no status client to ask'
              : "no status query was made (unexpected: 'reject')",
          mismatches: [],
        };
        const event = rejection(n, confirmation);
        return hold(
          n,
          durable,
          () => Promise.resolve(context.reject(event)),
          `${confirmation.detail}; kept and not credited; once checked, ipn.inbox.replay(key, ['failed'])`,
        );
      }
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
      return { kind: 'refused', event: rejection(n, confirmation) };
    },
    /**
     * At least once, a copy of a transaction with no expectation whose key a kept unexpected copy holds, with
     * another record (a forgery kept before the genuine notification came, or the genuine one kept before a
     * forgery): screened as a new one would be, by the one status query (through the client's guard: a flood
     * of copies asks at most what the guard lets through), only under `unexpected: 'verify'` with a status
     * client, before the answer (bounded by `storeTimeoutMs`). Confirmed, the service's record, to take the kept copy's place (or confirm it); else the
     * `rejected` event of a copy answered 503, never kept (the key is the kept copy's): the service resends
     * it, to be confirmed later, or credited once expected (`ipn.expect()`).
     */
    async recheck(
      n: IpnNotification,
    ): Promise<{ confirmed: true; status: StatusRecord } | { confirmed: false; event: RejectedEvent }> {
      const policy = options.unexpected;
      // Before the answer: bounded as at most once (storeTimeoutMs), not by verifyTimeoutMs; the query goes
      // on, and the client's cache answers the service's resend (one query, shared by the copies in flight).
      const { storeTimeoutMs } = options;
      const late = `the status query did not answer within ${storeTimeoutMs} ms (storeTimeoutMs)`;
      const confirmation: Confirmation =
        policy === 'verify' && statusClient !== undefined
          ? await within(confirm(n), storeTimeoutMs, () => new Error(late)).catch((): Confirmation => ({
              confirmed: false,
              detail: late,
              mismatches: [],
            }))
          : {
              confirmed: false,
              detail:
                policy === 'verify'
                  ? 'the router has no status client to ask'
                  : "no status query was made (unexpected: 'reject')",
              mismatches: [],
            };
      if (confirmation.confirmed) return confirmation;
      const fate =
        'its key is held by another copy kept unexpected, with another record: not kept nor credited, answered ' +
        '503 so that the service resends it (ipn.expect() it once checked, or ipn.reconcile() it)';
      return { confirmed: false, event: rejection(n, confirmation, fate) };
    },
    /**
     * An operator's `replay(key)` of a kept unexpected notification still under its hold lease (a crash
     * between its two writes): that lease ended, so that the store's `replay` makes it due. Only the hold
     * lease: a delivery's live lease is never broken. Resolves whether it ended one. `due` false: ended into
     * a kept copy, never due (see {@link endHold}).
     */
    endHold: async (key: string, due = true): Promise<boolean> =>
      durable !== undefined && endHold(durable, key, due),
  };
}
