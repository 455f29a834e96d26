/**
 * Exactly once with Prisma 7 (docs/orm.md, "Prisma"): Prisma and ipn-kit on one pg pool, each delivery
 * attempt in Prisma's interactive transaction, the listener crediting the ledger through `tx`. The client is
 * generated from examples/prisma/schema.prisma; test/integration/orm/prisma.test.ts runs this against a real
 * PostgreSQL, and the NestJS example (examples/nestjs/) does the same in NestJS's way.
 */
// #region prisma-setup
import { PrismaPg } from '@prisma/adapter-pg';
import type { Pool } from 'pg';
import { ipnRouter } from 'ipn-kit';
import { prismaTransactions } from 'ipn-kit/orm';
import { PostgresStore } from 'ipn-kit/postgres';
import { PrismaClient } from '../../prisma/generated/client.js'; // what `prisma generate` made of your schema

/** `schema`: where your tables are, when not in `public` (Prisma names it in each query it makes). */
export function prismaIpn(pool: Pool, schema = 'public') {
  // One pool: Prisma's pg adapter runs on the pool you give ipn-kit, and leaves it open on $disconnect().
  const prisma = new PrismaClient({ adapter: new PrismaPg(pool, { schema }) });
  const store = new PostgresStore({ pool, transactions: prismaTransactions(prisma) });
  const ipn = ipnRouter({ store, delivery: 'at-least-once' });

  ipn.on('successful', async (n, { tx }) => {
    // `tx` is Prisma's transaction client, typed with your models: what you write through it commits
    // together with ipn-kit's `delivered` mark, or rolls back with a failed attempt. No unique key needed.
    // Only the order this transaction was initiated for (custom_data), for its amount, and only once:
    const orderId = String(n.custom_data);
    const { amount } = n;
    if (amount === null) throw new Error(`${n.transaction_id} carries no amount`);
    const paid = await tx.order.updateMany({
      where: { id: orderId, transactionId: n.transaction_id, amount, paidAt: null },
      data: { paidAt: new Date() },
    });
    // Otherwise credit nothing: the throw rolls back; after its retries the notification is `dead` in the
    // inbox, for a person to look at (ipn.inbox, the operator's page).
    if (paid.count !== 1) throw new Error(`${n.transaction_id} is not the payment of order ${orderId}`);
    await tx.ledger.create({ data: { transactionId: n.transaction_id, orderId, amount } });
  });
  return { ipn, prisma };
}
// #endregion prisma-setup

// #region prisma-dead-letters
/** The notifications whose delivery gave up, newest first: for an operator's page of your own. */
export function deadNotifications(prisma: PrismaClient, since: Date) {
  return prisma.ipnInbox.findMany({
    where: { status: 'dead', receivedAt: { gte: since } },
    select: { key: true, attempts: true, lastError: true },
    orderBy: { receivedAt: 'desc' },
  });
}
// #endregion prisma-dead-letters
