import type { FinalState } from '../notification/schema.js';

/**
 * A transaction as the fake provider stores it. The notification and the status answer are both built from
 * it, in the service's own shapes (`ipnForm()`, `statusForm()`).
 * @inline
 */
export interface FakeTransaction {
  /** Shape `FKP.000001`: prefix, dot, digits. */
  transactionId: string;
  amount: number;
  /** Echoed as given: a string, or a number (sent back as a JSON number). */
  customData: string | number;
  /** Digits, starting with 0. */
  destination: string;
  customerName: string;
  serviceId: number;
  /** The final state the transaction reaches once processed. */
  outcome: FinalState;
  /** The current state: `PENDING1` until processed, then `outcome` (or what `setState` set). */
  state: string;
  createdAt: Date;
  updatedAt: Date;
}

/** The fields of a new transaction; the others get realistic defaults. */
export interface NewTransaction {
  transactionId: string;
  amount: number;
  customData: string | number;
  outcome: FinalState;
  /** @default 'PENDING1' */
  state?: string;
  /** @default '07' followed by the digits of the transaction id, padded to 10 digits */
  destination?: string;
  /** @default 'Awa Kone' */
  customerName?: string;
  /** @default 12 */
  serviceId?: number;
}

/** A transaction as it is right after initiation (or, with `state`, as it is later). */
export function newTransaction(fields: NewTransaction): FakeTransaction {
  const now = new Date();
  const digits = fields.transactionId.replace(/\D/g, '').slice(-8);
  return {
    transactionId: fields.transactionId,
    amount: fields.amount,
    customData: fields.customData,
    destination: fields.destination ?? `07${digits.padStart(8, '0')}`,
    customerName: fields.customerName ?? 'Awa Kone',
    serviceId: fields.serviceId ?? 12,
    outcome: fields.outcome,
    state: fields.state ?? 'PENDING1',
    createdAt: now,
    updatedAt: now,
  };
}

/** The final state opposite to `state`: what an out-of-order notification carries first. */
export function oppositeState(state: FinalState): FinalState {
  return state === 'SUCCESSFUL' ? 'FAILED' : 'SUCCESSFUL';
}

/**
 * The notification body the service POSTs to the IPN address, shaped like its own samples (and
 * `test/fixtures/ipn-successful.json`): every field, `comission` with one m, `response` set on SUCCESSFUL
 * and `error` on FAILED, `hash` empty, `p_id` a string. `state` overrides the transaction's current state.
 */
export function ipnForm(
  transaction: FakeTransaction,
  state: string = transaction.state,
): Record<string, unknown> {
  return {
    transaction_id: transaction.transactionId,
    amount: transaction.amount,
    benefice: 0,
    comission: Math.round(transaction.amount * 0.015),
    destination: transaction.destination,
    fee: 0,
    response: state === 'SUCCESSFUL' ? 'operation success' : '',
    error: state === 'FAILED' ? 'insufficient balance' : '',
    service_id: transaction.serviceId,
    customer_name: transaction.customerName,
    state,
    custom_data: transaction.customData,
    ipn_url: '', // empty in every sample, although the service knows it
    provider_id: null,
    sms_link: 0,
    created_at: stamp(transaction.createdAt),
    updated_at: stamp(transaction.updatedAt),
    ipn_state: 0,
    w_amount_after_transaction: '',
    p_last_wallet_amount: 125000,
    p_new_wallet_amount: null,
    p_id: '7',
    hash: '',
  };
}

/**
 * The record in a status answer's `data`: the notification's fields without `response`, `sms_link`,
 * `ipn_state` and `w_amount_after_transaction`, with `p_last_wallet_amount` and `hash` null and `p_id` a
 * number, as the service answers.
 */
export function statusForm(transaction: FakeTransaction): Record<string, unknown> {
  const { response, sms_link, ipn_state, w_amount_after_transaction, ...rest } = ipnForm(transaction);
  return { ...rest, p_last_wallet_amount: null, p_id: 7, hash: null };
}

/** The service's timestamp format: `YYYY-MM-DDThh:mm:ss.SSS+00:00`. */
export function stamp(date: Date): string {
  return date.toISOString().replace('Z', '+00:00');
}
