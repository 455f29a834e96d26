import type { Pool } from 'pg';
import { uniquePayload } from './payloads.js';
import { eventually } from './services.js';

/**
 * The documented listeners credit only the payment of an order the partner initiated (issue 33): the order
 * row `custom_data` names, with the transaction_id the service returned and the amount, not yet paid.
 */
export interface OrderRow {
  id: string;
  transactionId: string;
  amount: number;
  paid: boolean;
}

/** A SUCCESSFUL notification of its own order id (`order-<transaction_id>`). */
export function orderPayment(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  const payload = uniquePayload(overrides);
  return { ...payload, custom_data: `order-${String(payload.transaction_id)}` };
}

/** The order `payload` is the genuine payment of, unpaid. */
export const orderOf = (payload: Record<string, unknown>): OrderRow => ({
  id: String(payload.custom_data),
  transactionId: String(payload.transaction_id),
  amount: Number(payload.amount),
  paid: false,
});

/**
 * What a documented listener credits nothing for: another amount than the order's, an order initiated with
 * another transaction, an order that does not exist, an order already paid. Each with the order row to
 * insert before posting it (none for the unknown order).
 */
export function refusedPayments(): Array<{
  why: string;
  payload: Record<string, unknown>;
  order?: OrderRow;
}> {
  const [amount, transaction, unknown, paid] = [
    orderPayment(),
    orderPayment(),
    orderPayment(),
    orderPayment(),
  ];
  return [
    { why: 'another amount', payload: amount, order: { ...orderOf(amount), amount: 9_999 } },
    {
      why: 'another transaction',
      payload: transaction,
      order: { ...orderOf(transaction), transactionId: 'EFB.0' },
    },
    { why: 'an unknown order', payload: unknown },
    { why: 'an order already paid', payload: paid, order: { ...orderOf(paid), paid: true } },
  ];
}

/** The error a documented listener throws for each of them: the entry is `failed` with it, then `dead`. */
export const NOT_THE_PAYMENT = /is not the payment of order/;

/** The `orders` table of the documented listeners, on PostgreSQL. */
export const ORDERS =
  'CREATE TABLE orders (id text PRIMARY KEY, transaction_id text NOT NULL, amount numeric NOT NULL, paid_at timestamptz)';

/** Inserts `order` into the `orders` of `pool` (PostgreSQL). */
export const insertOrder = (pool: Pool, order: OrderRow) =>
  pool.query(
    'INSERT INTO orders (id, transaction_id, amount, paid_at) VALUES ($1, $2, $3, CASE WHEN $4::boolean THEN now() END)',
    [order.id, order.transactionId, order.amount, order.paid],
  );

/**
 * Posts each of refusedPayments() to a documented listener on PostgreSQL whose tables are on `pool`: each is
 * answered 200 and its entry fails with NOT_THE_PAYMENT (retried, then `dead`); no ledger row is written,
 * and no order is marked paid.
 */
export async function expectNothingCredited(
  pool: Pool,
  post: (body: unknown) => Promise<{ status: number }>,
  inbox = 'ipn_inbox',
) {
  const refused = refusedPayments();
  for (const { why, payload, order } of refused) {
    if (order) await insertOrder(pool, order);
    expect((await post(payload)).status).toBe(200);
    const entry = async () =>
      (
        await pool.query(`SELECT status, last_error FROM ${inbox} WHERE transaction_id = $1`, [
          payload.transaction_id,
        ])
      ).rows[0] as { status: string; last_error: string | null } | undefined;
    await eventually(`${why}: failed`, async () =>
      ['failed', 'dead'].includes((await entry())?.status ?? ''),
    );
    expect({ why, error: (await entry())?.last_error }).toEqual({
      why,
      error: expect.stringMatching(NOT_THE_PAYMENT),
    });
    const credited = await pool.query('SELECT 1 FROM ledger WHERE transaction_id = $1', [
      payload.transaction_id,
    ]);
    expect({ why, credited: credited.rowCount }).toEqual({ why, credited: 0 });
  }
  const { rows } = await pool.query('SELECT id FROM orders WHERE id = ANY($1) AND paid_at IS NOT NULL', [
    refused.map(({ order }) => order?.id),
  ]);
  expect(rows).toEqual([{ id: refused[3]?.order?.id }]); // only the order paid before
}
