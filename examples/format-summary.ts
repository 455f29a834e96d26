import type { DemoSummary } from './demo.js';
import type { PlannedPayment } from './payment-service.js';

type Align = 'left' | 'right';

/**
 * The demo's outcome as plain text for a terminal: one row per order with what the service sent for it, then
 * the counts of the IPN endpoint.
 */
export function formatSummary({
  orders,
  counts,
  review,
  payments,
  service,
  statusQueries,
}: DemoSummary): string {
  const sent = new Map(payments.map((payment) => [payment.orderId, describe(payment)]));
  const rows = orders.map((order) => [
    order.orderId,
    order.amount.toLocaleString('en-US'),
    order.status,
    String(order.credits),
    order.transactionId ?? '-',
    sent.get(order.orderId) ?? '-',
  ]);
  const header = ['Order', 'Amount (XOF)', 'Status', 'Credits', 'Transaction', 'The service sent'];
  const align: Align[] = ['left', 'right', 'left', 'right', 'left', 'left'];

  const tally = (status: string) => orders.filter((order) => order.status === status).length;
  const credits = orders.reduce((sum, order) => sum + order.credits, 0);
  // With `verify`, a copy that comes while the first copy of its notification is being verified is answered
  // 503; the service sends such a copy again, unless another copy sent at the same moment was answered 200.
  const sentAgain = service.posts - service.notifications - service.resends;
  const notSentAgain = service.putOff - sentAgain;
  const putOff =
    service.putOff === 0
      ? []
      : [
          `${service.putOff} of their POSTs came while the first copy of their notification was still being verified, and were`,
          `answered 503 (verification_pending): ${sentAgain} of them were sent again (the service resends until answered 200),`,
          `${notSentAgain} not (copies sent at once, one of which was answered 200); ${service.posts} POSTs in all.`,
        ];
  const lines = [
    `ipn-kit demo: ${payments.length} payments notified to a partner shop on loopback`,
    '',
    ...table(rows, align, header),
    '',
    `Orders: ${tally('paid')} paid, ${tally('failed')} failed, ${tally('pending')} pending; ${credits} credits in all`,
    '',
    `The service sent ${service.notifications + service.resends} notifications: ${service.notifications} distinct, ${service.resends} resends of them;`,
    ...putOff,
    `a stranger sent 1 forged SUCCESSFUL for ${service.forgedOrderId} and 1 malformed request.`,
    'The partner app, verifying each notification with the status query, saw:',
    ...table(
      [
        ['Received', String(counts.received), 'notifications handled, each exactly once'],
        [
          'Duplicates',
          String(counts.duplicates),
          notSentAgain === 0
            ? 'resends dropped, concurrent copies included'
            : `resends dropped, concurrent copies included: all ${service.resends} but the ${notSentAgain} answered 503 and not sent again`,
        ],
        [
          'Invalid',
          String(counts.invalid),
          `malformed request rejected (answered ${service.malformedStatus})`,
        ],
        [
          'Rejected',
          String(counts.rejected),
          'contradicted by the status query (the forgery, a FAILED the service reversed): never credited',
        ],
        ['Queries', String(statusQueries), 'status queries made to verify them: at most one per transaction'],
      ],
      ['left', 'right', 'left'],
    ),
  ];
  if (review.length > 0) lines.push('', 'Needs review:', ...review.map((line) => `  ${line}`));
  return lines.join('\n');
}

/** What the service sent for one payment, such as "SUCCESSFUL x4, at once". */
function describe({ states, copies, concurrent }: PlannedPayment): string {
  const times = copies > 1 ? ` x${copies}${concurrent ? ', at once' : ''}` : '';
  return states.map((state) => state + times).join(', then ');
}

/** Rows padded into columns two spaces apart, under a header and a rule when there is a header. */
function table(rows: string[][], align: Align[], header?: string[]): string[] {
  const all = header ? [header, ...rows] : rows;
  const widths = align.map((_, column) => Math.max(...all.map((row) => (row[column] ?? '').length)));
  const format = (row: string[]) =>
    row
      .map((cell, column) => {
        const width = widths[column] ?? 0;
        return align[column] === 'right' ? cell.padStart(width) : cell.padEnd(width);
      })
      .join('  ')
      .trimEnd();
  const rule = widths.map((width) => '-'.repeat(width)).join('  ');
  return header ? [format(header), rule, ...rows.map(format)] : rows.map(format);
}
