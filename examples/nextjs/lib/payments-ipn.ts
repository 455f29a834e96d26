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
    await tx.ledger.create({
      data: { transactionId: n.transaction_id, orderId: String(n.custom_data), amount: n.amount ?? 0 },
    });
    console.log(`prisma ledger ${n.custom_data}: ${n.amount} (${n.transaction_id})`);
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
