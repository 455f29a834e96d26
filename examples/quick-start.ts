import express from 'express';
import { z } from 'zod';
import { ipnRouter, ipnUrl } from 'ipn-kit';

const secret = process.env.IPN_SECRET ?? ''; // 16+ characters, made once: openssl rand -hex 24
if (!secret) throw new Error('set IPN_SECRET: the IPN address carries it, so a forger cannot post to it');
const ipn = ipnRouter({
  secret, // a request without the token that ipnUrl() put in the address is refused 401
  // What you put in custom_data when you initiated the payment; the service echoes it back.
  customData: z.object({ orderId: z.string() }),
});

// Your orders (a table in your database), with the transaction_id the service returned at initiation.
type Order = { amount: number; transactionId: string; status: 'pending' | 'paid' | 'failed' };
const orders = new Map<string, Order>();

/** When you initiate a payment: `initiate` is your request to the service; it returns the transaction_id. */
async function startPayment(orderId: string, amount: number, initiate: (request: object) => Promise<string>) {
  const ipn_url = ipnUrl(`${process.env.PUBLIC_URL ?? 'http://localhost:3000'}/ipn`, { secret });
  const transactionId = await initiate({ amount, custom_data: JSON.stringify({ orderId }), ipn_url });
  orders.set(orderId, { amount, transactionId, status: 'pending' });
  await ipn.expect(transactionId, { amount, customData: { orderId } }); // another amount is `rejected`
}

/** The order a notification pays, only if it is this order's transaction and amount. */
function orderOf(n: { transaction_id: string; amount: number | null; customData?: { orderId: string } }) {
  const order = n.customData && orders.get(n.customData.orderId);
  return order?.transactionId === n.transaction_id && order.amount === n.amount ? order : undefined;
}

ipn.on('successful', (n) => {
  const order = orderOf(n);
  if (!order) return console.warn(`check ${n.transaction_id} by hand: not an order's payment`);
  if (order.status === 'paid') return; // credit once (in SQL: UPDATE ... WHERE status <> 'paid')
  order.status = 'paid';
  console.log(`credit order ${n.customData?.orderId}: ${n.amount} paid (${n.transaction_id})`);
});
ipn.on('failed', (n) => {
  const order = orderOf(n);
  if (order?.status !== 'pending') return; // a FAILED never undoes a paid order
  order.status = 'failed';
  console.log(`order ${n.customData?.orderId} failed: ${n.error}`);
});
ipn.on('conflict', ({ notification }) =>
  console.warn(`${notification.transaction_id} FAILED after SUCCESSFUL: the order stays paid; check it`),
);
ipn.on('error', ({ error, notification }) => console.error(error.message, notification?.transaction_id));

const app = express();
app.use('/ipn', ipn); // before express.json() and any CSRF or bot filter
app.use(express.json()); // the rest of your app

const port = Number(process.env.PORT ?? 3000);
app.listen(port, () => {
  // For this demo: order-1001 (5000) was initiated, and the service answered with EFB.001158.
  void startPayment('order-1001', 5000, () => Promise.resolve('EFB.001158')).then(() =>
    console.log(`IPN endpoint: ${ipnUrl(`http://localhost:${port}/ipn`, { secret })}`),
  );
});
