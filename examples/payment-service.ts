import type { FakeProvider } from 'ipn-kit/testing';

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
  /**
   * Every POST sent for the payments: one per copy, plus one per copy sent again after a non-200 answer (the
   * service resends a notification until it is answered 200).
   */
  posts: number;
  /**
   * The POSTs answered 503 (`verification_pending`): copies that came while the first copy of their
   * notification was still being verified. A copy sent one after another is sent again (one more POST); a
   * copy sent at once with others is not when one of them was answered 200, which ends that delivery.
   */
  putOff: number;
  /** Every answer to those POSTs that was neither 200 nor 503: none expected. */
  otherAnswers: number[];
  /** The HTTP status the partner answered to the malformed request (400 expected). */
  malformedStatus: number;
  /** The HTTP status the partner answered to the forged notification (200: it must not tell a forger). */
  forgedStatus: number;
  /** The order the forger claimed to pay. */
  forgedOrderId: string;
}

const CUSTOMERS = ['Awa Kone', 'Yao Koffi', 'Mariam Traore', 'Kouadio Yao', 'Fatou Diallo'];

/**
 * Plays the payment service against a partner's IPN address with ipn-kit's fake provider: initiates every
 * payment and lets the provider notify it (with its resends), then a stranger forges a SUCCESSFUL for an
 * unpaid order, and posts one malformed request.
 */
export async function playPaymentService(
  provider: FakeProvider,
  ipnUrl: string,
  payments: readonly PlannedPayment[] = PAYMENTS,
): Promise<ServiceReport> {
  const report: ServiceReport = {
    notifications: 0,
    resends: 0,
    posts: 0,
    putOff: 0,
    otherAnswers: [],
    malformedStatus: 0,
    forgedStatus: 0,
    forgedOrderId: '',
  };
  for (const [index, payment] of payments.entries()) {
    const extra = payment.copies - 1;
    const { delivered } = provider.initiate({
      transactionId: payment.transactionId,
      amount: payment.amount,
      ipnUrl,
      customData: JSON.stringify({ orderId: payment.orderId }),
      outcome: payment.states[payment.states.length - 1] ?? 'SUCCESSFUL',
      // FAILED then SUCCESSFUL: the service notified a failure it later reversed.
      outOfOrder: payment.states.length > 1,
      concurrent: payment.concurrent ? payment.copies : 1,
      duplicates: payment.concurrent ? 0 : extra,
      customerName: CUSTOMERS[index % CUSTOMERS.length],
    });
    const { acknowledged, attempts, statuses } = await delivered;
    if (!acknowledged) throw new Error(`the partner never acknowledged ${payment.transactionId}`);
    report.notifications += payment.states.length;
    report.resends += payment.states.length * extra;
    report.posts += attempts;
    report.putOff += statuses.filter((status) => status === 503).length;
    report.otherAnswers.push(...statuses.filter((status) => status !== 200 && status !== 503));
    // Each copy sent one after another is resent until answered 200: the demo says they all were.
    const acknowledgedCopies = statuses.filter((status) => status === 200).length;
    if (!payment.concurrent && acknowledgedCopies !== payment.states.length * payment.copies) {
      throw new Error(
        `a copy of ${payment.transactionId} was never acknowledged (answers: ${statuses.join(', ')})`,
      );
    }
  }
  // Someone who learned the IPN address claims an unpaid order was paid.
  const victim = payments.find((payment) => !payment.states.includes('SUCCESSFUL'));
  report.forgedOrderId = victim?.orderId ?? '';
  report.forgedStatus = await provider.forge({
    ipnUrl,
    customData: JSON.stringify({ orderId: report.forgedOrderId }),
    amount: victim?.amount ?? 1,
  });
  const malformed = await fetch(ipnUrl, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{"transaction_id": "EFB.009999", "state": "SUCCESSFUL",',
  });
  await malformed.arrayBuffer();
  report.malformedStatus = malformed.status;
  return report;
}
