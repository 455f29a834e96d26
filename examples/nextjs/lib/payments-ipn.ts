// lib/payments-ipn.ts: exactly once with Prisma 7 in a Next.js App Router app (docs/recipes.md).
// #region nextjs-prisma-router
import { PrismaPg } from '@prisma/adapter-pg';
import { Pool } from 'pg';
import { createStatusClient, ipnRouter } from 'ipn-kit';
import { prismaTransactions } from 'ipn-kit/orm';
import { PostgresStore } from 'ipn-kit/postgres';
import { PrismaClient } from '../prisma/generated/client';

function createPaymentsIpn() {
  // One pool for Prisma and the store; `schema` only when your tables are not in `public`.
  const pool = new Pool({ connectionString: process.env.DATABASE_URL });
  pool.on('error', (error) => console.error(`pool error: ${error.message}`));
  const prisma = new PrismaClient({ adapter: new PrismaPg(pool, { schema: process.env.DATABASE_SCHEMA }) });
  const store = new PostgresStore({ pool, transactions: prismaTransactions(prisma) });
  const ipn = ipnRouter({
    store,
    delivery: 'at-least-once',
    verify: createStatusClient({
      baseUrl: process.env.PAYMENT_STATUS_URL ?? 'https://payments.example/api_v1/transaction',
      apiKey: process.env.PAYMENT_API_KEY ?? '',
    }),
  });

  ipn.on('successful', async (n, { tx }) => {
    // Prisma's transaction client: the credit commits with the inbox's `delivered` mark, or not at all.
    // Only the order this transaction was initiated for (custom_data), for its amount, and only once:
    const orderId = String(n.custom_data);
    const { amount } = n;
    if (amount === null) throw new Error(`${n.transaction_id} carries no amount`);
    const paid = await tx.order.updateMany({
      where: { id: orderId, transactionId: n.transaction_id, amount, paidAt: null },
      data: { paidAt: new Date() },
    });
    // Otherwise credit nothing: the throw rolls back; after its retries the notification is `dead`.
    if (paid.count !== 1) throw new Error(`${n.transaction_id} is not the payment of order ${orderId}`);
    await tx.ledger.create({ data: { transactionId: n.transaction_id, orderId, amount } });
    console.log(`prisma ledger ${orderId}: ${amount} (${n.transaction_id})`);
  });
  ipn.on('error', ({ error, notification }) =>
    console.error(`ipn error ${notification?.transaction_id}: ${error.message}`),
  );
  return { ipn, store, prisma };
}

// One router per process. `next dev` evaluates this module again at each edit: kept on globalThis, the
// router (its pool, its timers) survives the reload instead of piling up. Made at the first call, never
// while `next build` loads the route.
const globalForIpn = globalThis as typeof globalThis & {
  paymentsIpn?: ReturnType<typeof createPaymentsIpn>;
};
export const getPaymentsIpn = () => (globalForIpn.paymentsIpn ??= createPaymentsIpn());
// #endregion nextjs-prisma-router
