import { setTimeout as sleep } from 'node:timers/promises';

/** A final state, as the service notifies it. */
export type ServiceState = 'SUCCESSFUL' | 'FAILED';

/** One payment the service processes, and how it notifies the partner about it. */
export interface PlannedPayment {
  orderId: string;
  amount: number;
  transactionId: string;
  /** The states notified, in order: one final state, or FAILED then SUCCESSFUL (the customer retried). */
  states: readonly ServiceState[];
  /** Copies sent of each notification: 1 is a single delivery, more are resends. */
  copies: number;
  /** Send the copies at once, as when the service retries before the first answer came back. */
  concurrent?: boolean;
}

const OK = ['SUCCESSFUL'] as const;
const KO = ['FAILED'] as const;

/** Twenty payments: most succeed, a few fail, some are resent, one fails and then succeeds. */
export const PAYMENTS: readonly PlannedPayment[] = [
  { orderId: 'order-1001', amount: 5000, transactionId: 'EFB.001158', states: OK, copies: 1 },
  { orderId: 'order-1002', amount: 2500, transactionId: 'PIX_22827809', states: KO, copies: 1 },
  { orderId: 'order-1003', amount: 12000, transactionId: 'EFB.001159', states: OK, copies: 3 },
  { orderId: 'order-1004', amount: 750, transactionId: 'EFB.001160', states: OK, copies: 1 },
  {
    orderId: 'order-1005',
    amount: 30000,
    transactionId: 'PIX_22827810',
    states: OK,
    copies: 4,
    concurrent: true,
  },
  { orderId: 'order-1006', amount: 1500, transactionId: 'EFB.001161', states: KO, copies: 2 },
  { orderId: 'order-1007', amount: 8200, transactionId: 'EFB.001162', states: OK, copies: 1 },
  {
    orderId: 'order-1008',
    amount: 4000,
    transactionId: 'PIX_22827811',
    states: ['FAILED', 'SUCCESSFUL'],
    copies: 1,
  },
  { orderId: 'order-1009', amount: 600, transactionId: 'EFB.001163', states: OK, copies: 2 },
  {
    orderId: 'order-1010',
    amount: 25000,
    transactionId: 'EFB.001164',
    states: OK,
    copies: 5,
    concurrent: true,
  },
  { orderId: 'order-1011', amount: 3300, transactionId: 'PIX_22827812', states: OK, copies: 1 },
  { orderId: 'order-1012', amount: 9900, transactionId: 'EFB.001165', states: KO, copies: 1 },
  { orderId: 'order-1013', amount: 1000, transactionId: 'EFB.001166', states: OK, copies: 1 },
  {
    orderId: 'order-1014',
    amount: 45000,
    transactionId: 'PIX_22827813',
    states: KO,
    copies: 3,
    concurrent: true,
  },
  { orderId: 'order-1015', amount: 2000, transactionId: 'EFB.001167', states: OK, copies: 2 },
  { orderId: 'order-1016', amount: 6500, transactionId: 'EFB.001168', states: OK, copies: 1 },
  {
    orderId: 'order-1017',
    amount: 17500,
    transactionId: 'PIX_22827814',
    states: OK,
    copies: 3,
    concurrent: true,
  },
  { orderId: 'order-1018', amount: 800, transactionId: 'EFB.001169', states: OK, copies: 1 },
  { orderId: 'order-1019', amount: 5500, transactionId: 'EFB.001170', states: KO, copies: 1 },
  { orderId: 'order-1020', amount: 11000, transactionId: 'PIX_22827815', states: OK, copies: 2 },
];

/** What the service sent, to compare with what the partner counted. */
export interface ServiceReport {
  /** Distinct notifications: one per payment and state. */
  notifications: number;
  /** Extra copies of notifications already sent (the partner should drop each as a duplicate). */
  resends: number;
  /** The HTTP status the partner answered to the malformed request (400 expected). */
  malformedStatus: number;
}

const MAX_ATTEMPTS = 5;
const RETRY_DELAY_MS = 50;
const CUSTOMERS = ['Awa Kone', 'Yao Koffi', 'Mariam Traore', 'Kouadio Yao', 'Fatou Diallo'];

/**
 * Plays the payment service against a partner's IPN address: notifies every payment (with its resends), then
 * posts one malformed request, as a broken proxy or a stranger might.
 */
export async function playPaymentService(
  ipnUrl: string,
  payments: readonly PlannedPayment[] = PAYMENTS,
): Promise<ServiceReport> {
  const report: ServiceReport = { notifications: 0, resends: 0, malformedStatus: 0 };
  for (const [index, payment] of payments.entries()) {
    for (const state of payment.states) {
      const body = JSON.stringify(notification(payment, state, index));
      const send = () => deliver(ipnUrl, body);
      if (payment.concurrent) await Promise.all(Array.from({ length: payment.copies }, send));
      else for (let copy = 0; copy < payment.copies; copy += 1) await send();
      report.notifications += 1;
      report.resends += payment.copies - 1;
    }
  }
  const malformed = await post(ipnUrl, '{"transaction_id": "EFB.009999", "state": "SUCCESSFUL",');
  report.malformedStatus = malformed.status;
  return report;
}

/** POSTs a notification until the partner answers 200, like the real service (which gives up eventually). */
async function deliver(url: string, body: string): Promise<void> {
  for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt += 1) {
    const { status } = await post(url, body);
    if (status === 200) return;
    await sleep(RETRY_DELAY_MS * attempt);
  }
  throw new Error(`the partner did not answer 200 to ${body.slice(0, 60)}... after ${MAX_ATTEMPTS} attempts`);
}

async function post(url: string, body: string): Promise<{ status: number }> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
  });
  await response.arrayBuffer(); // read the answer to the end so the connection is reused
  return { status: response.status };
}

/**
 * A notification with every field of the interface. `EFB.` transactions use the documented shape (numbers,
 * empty strings, the service's `comission` spelling); `PIX_` ones the looser shape seen in the wild (numbers
 * as strings, nulls, extra fields).
 */
function notification(payment: PlannedPayment, state: ServiceState, index: number): Record<string, unknown> {
  const ok = state === 'SUCCESSFUL';
  const created = new Date(Date.UTC(2026, 10, 20, 10, index * 3, 0));
  const updated = new Date(created.getTime() + 7_412);
  const common = {
    transaction_id: payment.transactionId,
    destination: `07000${String(index + 1).padStart(5, '0')}`,
    customer_name: CUSTOMERS[index % CUSTOMERS.length],
    state,
    custom_data: JSON.stringify({ orderId: payment.orderId }),
    ipn_url: '',
    provider_id: null,
    created_at: stamp(created),
    updated_at: stamp(updated),
    p_new_wallet_amount: null,
  };
  if (payment.transactionId.startsWith('EFB.')) {
    return {
      ...common,
      amount: payment.amount,
      benefice: 0,
      comission: Math.round(payment.amount * 0.015),
      fee: 0,
      response: ok ? 'operation success' : '',
      error: ok ? '' : 'insufficient balance',
      service_id: 12,
      sms_link: 0,
      ipn_state: 0,
      w_amount_after_transaction: '',
      p_last_wallet_amount: 125000,
      p_id: '7',
      hash: '',
    };
  }
  return {
    ...common,
    amount: String(payment.amount),
    benefice: '0',
    commission: '0',
    fee: '0',
    // Seen in an official sample: a FAILED notification that also says "operation success".
    response: 'operation success',
    error: ok ? null : 'transaction declined by the customer',
    service_id: '3',
    sms_link: null,
    ipn_state: 1,
    w_amount_after_transaction: null,
    p_last_wallet_amount: null,
    p_id: 7,
    hash: null,
    currency: 'XOF',
    transaction_channel: 'wave',
  };
}

/** The service's timestamp format: `YYYY-MM-DDThh:mm:ss.SSS+00:00`. */
function stamp(date: Date): string {
  return date.toISOString().replace('Z', '+00:00');
}
