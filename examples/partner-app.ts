import express from 'express';
import { z } from 'zod';
import { ipnRouter, type StatusSource } from 'ipn-kit';

/** Where an order stands: waiting for its payment, paid, or failed (the customer may pay again). */
export type OrderStatus = 'pending' | 'paid' | 'failed';

/** An order of the partner's shop, kept in memory for the demo. */
export interface Order {
  orderId: string;
  /** The amount the customer must pay, in XOF. */
  amount: number;
  status: OrderStatus;
  /** How many times the customer was credited for this order: 1 when paid, never more. */
  credits: number;
  /** The payment service's transaction, once a notification for this order arrived. */
  transactionId?: string;
  /** Why the order failed, as the service said. */
  error?: string;
}

/** What the IPN endpoint has seen so far. */
export interface IpnCounts {
  /** First deliveries of a notification (each `transaction_id` and `state` once). */
  received: number;
  /** Resends of a notification already handled, dropped by ipn-kit. */
  duplicates: number;
  /** Requests rejected as not a notification at all. */
  invalid: number;
  /** Notifications the service's own record contradicts (forged, or superseded): never credited. */
  rejected: number;
}

/** The partner's app and the state the demo reads back. */
export interface PartnerApp {
  app: express.Express;
  orders: Map<string, Order>;
  counts: IpnCounts;
  /** Notifications that matched no order, or the wrong amount: a person should look at them. */
  review: string[];
  /** Releases what the IPN router holds; call it on shutdown. */
  close(): Promise<void>;
}

const newOrder = z.object({ orderId: z.string().min(1), amount: z.number().positive() });

/**
 * Builds the partner's shop: `POST /orders` creates an order, and `/ipn` receives the payment service's
 * notifications and reconciles the orders. With `verify` (a status client), each notification is confirmed
 * with the service before it is credited.
 *
 * @example
 * const client = createStatusClient({ baseUrl: process.env.PAYMENT_API!, apiKey: process.env.API_KEY! });
 * const { app } = createPartnerApp({ verify: client });
 * app.listen(3000);
 */
export function createPartnerApp(
  options: { verify?: StatusSource; verifyRetryDelayMs?: number } = {},
): PartnerApp {
  const orders = new Map<string, Order>();
  const counts: IpnCounts = { received: 0, duplicates: 0, invalid: 0, rejected: 0 };
  const review: string[] = [];

  // We put `{"orderId": "..."}` in custom_data when initiating a payment; the service echoes it back.
  const ipn = ipnRouter({
    customData: z.object({ orderId: z.string() }),
    verify: options.verify,
    verifyRetryDelayMs: options.verifyRetryDelayMs,
  });

  ipn.on('notification', () => {
    counts.received += 1;
  });

  ipn.on('successful', (n) => {
    if (n.customDataError) {
      review.push(`${n.transaction_id}: ${n.customDataError.message}`);
      return;
    }
    const order = orders.get(n.customData.orderId);
    if (!order) {
      review.push(`${n.transaction_id}: paid for ${n.customData.orderId}, which is not one of our orders`);
      return;
    }
    // custom_data comes back as we sent it, but the amount is what was actually paid: check it.
    if (n.amount !== order.amount) {
      review.push(`${n.transaction_id}: paid ${n.amount} for ${order.orderId}, which costs ${order.amount}`);
      return;
    }
    // No "already paid?" check: ipn-kit emits each transaction's SUCCESSFUL once, even when resends of it
    // arrive at the same time, so crediting here cannot happen twice.
    order.credits += 1;
    order.status = 'paid';
    order.transactionId = n.transaction_id;
  });

  ipn.on('failed', (n) => {
    if (n.customDataError) {
      review.push(`${n.transaction_id}: ${n.customDataError.message}`);
      return;
    }
    const order = orders.get(n.customData.orderId);
    // A payment can fail and then succeed on a new attempt; a FAILED never undoes a payment already made.
    if (!order || order.status === 'paid') return;
    order.status = 'failed';
    order.transactionId = n.transaction_id;
    // `error` is the service's explanation; the state, not this text, decides what happened.
    order.error = n.error;
  });

  ipn.on('duplicate', () => {
    counts.duplicates += 1;
  });

  // Answered 400/413/415 already; worth an alert if it keeps happening (someone probing the endpoint).
  ipn.on('invalid', () => {
    counts.invalid += 1;
  });

  // The status query contradicts the notification: a forgery, or a state the service has since reversed.
  ipn.on('rejected', () => {
    counts.rejected += 1;
  });

  // A listener above threw: the service got its 200, so this order must be fixed by hand.
  ipn.on('error', ({ error, notification }) => {
    review.push(`${notification?.transaction_id ?? 'unknown transaction'}: ${error.message}`);
  });

  const app = express();
  // The IPN router reads its own body, so it goes before the app's global JSON parser.
  app.use('/ipn', ipn);
  app.use(express.json());

  app.post('/orders', (req, res) => {
    const parsed = newOrder.safeParse(req.body);
    if (!parsed.success) {
      res.status(400).json({ error: 'invalid_order', issues: parsed.error.issues });
      return;
    }
    const order: Order = { ...parsed.data, status: 'pending', credits: 0 };
    orders.set(order.orderId, order);
    res.status(201).json(order);
  });

  app.get('/orders', (_req, res) => {
    res.json([...orders.values()]);
  });

  return { app, orders, counts, review, close: () => ipn.close() };
}
