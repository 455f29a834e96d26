import { and, eq, isNull } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { Pool } from 'pg';
import { createStatusClient, ipnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { drizzleTransactions } from 'ipn-kit/orm';
import { ledger, orders } from './schema';

// Exactly once on your ledger, through Drizzle: each delivery attempt runs in a Drizzle transaction, and the
// credit commits together with the inbox's `delivered` mark. The inbox table comes from `store.migrate()`,
// run once when you deploy (or from your Drizzle migrations: see docs/orm.md).
function createLedgerIpn() {
  const pool = new Pool({ connectionString: process.env.DATABASE_URL });
  pool.on('error', (error) => console.error(`pool error ${error.message}`));
  const db = drizzle({ client: pool });
  const ipn = ipnRouter({
    store: new PostgresStore({ pool, transactions: drizzleTransactions(db) }),
    delivery: 'at-least-once',
    verify: createStatusClient({
      baseUrl: process.env.PAYMENT_STATUS_URL ?? 'https://payments.example/api_v1/transaction',
      apiKey: process.env.PAYMENT_API_KEY ?? '',
    }),
  });
  ipn.on('successful', async (n, { tx }) => {
    // Only the order this transaction was initiated for (custom_data), for its amount, and only once:
    const orderId = String(n.custom_data);
    const { amount } = n;
    if (amount === null) throw new Error(`${n.transaction_id} carries no amount`);
    const paid = await tx
      .update(orders)
      .set({ paidAt: new Date() })
      .where(
        and(
          eq(orders.id, orderId),
          eq(orders.transactionId, n.transaction_id),
          eq(orders.amount, String(amount)),
          isNull(orders.paidAt),
        ),
      )
      .returning({ id: orders.id });
    // Otherwise credit nothing: the throw rolls back; after its retries the notification is `dead`.
    if (paid.length !== 1) throw new Error(`${n.transaction_id} is not the payment of order ${orderId}`);
    await tx.insert(ledger).values({ transactionId: n.transaction_id, orderId, amount: String(amount) });
    console.log(`ledger ${orderId}: ${amount} (${n.transaction_id})`);
  });
  ipn.on('error', ({ error }) => console.error(`error ${error.message}`));
  return ipn;
}

// #region singleton
// One router per process. Made at the first request, not when `next build` loads the route (the build
// has no database), and kept on globalThis: `next dev` evaluates this module again at every edit, and a
// module-level variable would make one more router, pool and set of timers each time.
const kept = globalThis as typeof globalThis & { ledgerIpn?: ReturnType<typeof createLedgerIpn> };
export const getLedgerIpn = () => (kept.ledgerIpn ??= createLedgerIpn());
// #endregion singleton
