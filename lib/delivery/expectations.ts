import { IpnKitError, messageOf, StoreError } from '../shared/errors.js';
import type { IpnNotification } from '../notification/schema.js';
import type { Expectation, ExpectationStore } from '../stores/expectation-store.js';
import type { Store } from '../stores/store.js';
import { sameCustomData, type RejectedEvent, type VerifiedField } from '../status/verify-notification.js';
import type { DeliveryContext } from './delivery-context.js';

/**
 * What `ipn.expect()` takes besides the transaction id: what to check the notification against.
 * @inline
 */
export interface ExpectOptions {
  /** The `custom_data` given at initiation: text, or a value sent as its JSON text. */
  customData?: unknown;
  /** The transaction's amount. */
  amount?: number;
}

/** What an incoming notification's expectation says about it. */
export type ExpectationCheck =
  | { kind: 'none' | 'match' }
  | { kind: 'mismatch'; event: RejectedEvent }
  | { kind: 'error'; error: StoreError };

/** The check of a notification no expectation is kept for. */
export const NO_EXPECTATION: ExpectationCheck = Object.freeze({ kind: 'none' });

/**
 * Whether an outcome of an expected transaction ends its expectation, whoever learnt it (the router from a
 * notification, the sweep from a status query). Only `SUCCESSFUL` does. A `FAILED` leaves it in place: the
 * service may still turn the transaction `SUCCESSFUL`, and a `SUCCESSFUL` copy must then match the
 * expectation too (a forged one, with another amount, is rejected); the sweep forgets it after
 * `reconcileAttempts` queries.
 */
export function settlesExpectation(state: string): boolean {
  return state === 'SUCCESSFUL';
}

/** The fields where a record contradicts its expectation (only the fields the expectation holds). */
export function contradictions(expectation: Expectation, record: IpnNotification): VerifiedField[] {
  const fields: VerifiedField[] = [];
  if (expectation.amount !== undefined && expectation.amount !== record.amount) fields.push('amount');
  if (expectation.customData !== undefined && !sameCustomData(expectation.customData, record.custom_data))
    fields.push('custom_data');
  return fields;
}

/** The expectations of a router: `ipn.expect()`, the check of each notification, and settling. */
export function createExpectations<C>(context: DeliveryContext<C>, store: Store) {
  const { options, report } = context;
  const expectations: ExpectationStore | undefined = store.expectations;
  // A router that never uses expectations pays nothing for them: no read, no delete per notification.
  let active = options.statusClient !== undefined;

  function stored(): ExpectationStore {
    if (expectations) return expectations;
    throw new IpnKitError(
      'IPN_NO_EXPECTATIONS',
      'ipn.expect() needs a store that keeps expectations: MemoryStore, RedisStore or PostgresStore',
    );
  }

  return {
    /** The store's expectations, if it has any. */
    store: expectations,

    async expect(transactionId: string, given: ExpectOptions = {}): Promise<void> {
      if (typeof transactionId !== 'string' || transactionId.length === 0)
        throw new TypeError('ipn.expect: transactionId must be a non-empty string');
      const { customData, amount } = given ?? {};
      if (amount !== undefined && (typeof amount !== 'number' || !Number.isFinite(amount)))
        throw new TypeError(`ipn.expect: amount must be a finite number, got ${String(amount)}`);
      const text =
        customData === undefined || typeof customData === 'string' ? customData : JSON.stringify(customData);
      const target = stored();
      active = true;
      const now = Date.now();
      await target.put({
        transactionId,
        customData: text,
        amount,
        expectedAt: now,
        dueAt: now + options.reconcileAfterMs,
        attempts: 0,
      });
    },

    /** Whether {@link check} can find anything: `false` until expectations are in use, and without a store of them. */
    inUse: (): boolean => expectations !== undefined && active,

    /**
     * Compares a notification with its expectation, if there is one; no status query is made. Only once
     * expectations are in use: with `statusClient`, or after this process called `ipn.expect()`.
     */
    async check(n: IpnNotification): Promise<ExpectationCheck> {
      if (!expectations || !active) return { kind: 'none' };
      let expectation: Expectation | undefined;
      try {
        expectation = await expectations.get(n.transaction_id);
      } catch (cause) {
        const message = `the store failed to read the expectation of ${n.transaction_id}: ${messageOf(cause)}`;
        return { kind: 'error', error: new StoreError(message, { cause }) };
      }
      if (expectation === undefined) return { kind: 'none' };
      const mismatches = contradictions(expectation, n);
      if (mismatches.length === 0) return { kind: 'match' };
      const message = `the notification of ${n.transaction_id} contradicts its expectation in ${mismatches.join(', ')}: not credited`;
      return { kind: 'mismatch', event: { reason: 'mismatch', message, mismatches, notification: n } };
    },

    /**
     * A notification that matched its expectation was accepted: the expectation is settled when its state
     * ends it ({@link settlesExpectation}: `SUCCESSFUL`, not `FAILED`).
     */
    settle(n: IpnNotification, checked: ExpectationCheck): void {
      if (!expectations || checked.kind !== 'match' || !settlesExpectation(n.state)) return;
      Promise.resolve()
        .then(() => expectations.delete(n.transaction_id))
        .catch((cause: unknown) =>
          report(
            new StoreError(
              `the store failed to settle the expectation of ${n.transaction_id}: ${messageOf(cause)}`,
              { cause },
            ),
            n,
          ),
        );
    },
  };
}

/** What {@link createExpectations} returns. */
export type Expectations = ReturnType<typeof createExpectations>;
