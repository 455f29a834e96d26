/**
 * Exactly once with Drizzle: ipn-kit's tables declared in your Drizzle schema (so that drizzle-kit leaves
 * them as `store.migrate()` made them), and a router whose listeners credit the ledger through Drizzle's
 * transaction. test/integration/orm/drizzle.test.ts checks the tables against the real ones and runs the
 * router against a real PostgreSQL.
 */
// #region tables
import { sql } from 'drizzle-orm';
import {
  bigint,
  bigserial,
  check,
  doublePrecision,
  index,
  integer,
  json,
  jsonb,
  pgTable,
  text,
  timestamp,
} from 'drizzle-orm/pg-core';

/** ipn-kit's inbox, as `store.migrate()` (or `postgresSchemaSql()`) creates it. */
export const ipnInbox = pgTable(
  'ipn_inbox',
  {
    key: text('key').primaryKey(),
    transactionId: text('transaction_id').notNull(),
    state: text('state').notNull(),
    record: jsonb('record').notNull(),
    status: text('status', { enum: ['received', 'delivered', 'failed', 'dead'] }).notNull(),
    attempts: integer('attempts').notNull().default(0),
    lastError: text('last_error'),
    receivedAt: timestamp('received_at', { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
    nextAttemptAt: timestamp('next_attempt_at', { withTimezone: true }).notNull().defaultNow(),
    deliveredAt: timestamp('delivered_at', { withTimezone: true }),
    leaseId: text('lease_id'),
    leaseUntil: timestamp('lease_until', { withTimezone: true }),
  },
  (t) => [
    // The names PostgreSQL gave the checks: drizzle-kit matches constraints by name.
    check('ipn_inbox_status_check', sql`${t.status} IN ('received', 'delivered', 'failed', 'dead')`),
    check('ipn_inbox_check', sql`${t.key} = ${t.transactionId} || ':' || ${t.state}`),
    // Schema version 7: no claim of an older ipn-kit (delivered, the record {}, a token) in a rolling deploy.
    check(
      'ipn_kit_no_claim_marker',
      sql`NOT (${t.record} = '{}'::jsonb AND ${t.status} = 'delivered' AND ${t.leaseId} IS NOT NULL)`,
    ),
    index('ipn_inbox_due_idx').on(t.status, t.nextAttemptAt),
  ],
);

/** The expectations beside it (`expect()`), which `store.migrate()` creates too. */
export const ipnInboxExpected = pgTable(
  'ipn_inbox_expected',
  {
    transactionId: text('transaction_id').primaryKey(),
    customData: text('custom_data'),
    amount: doublePrecision('amount'),
    expectedAt: bigint('expected_at', { mode: 'number' }).notNull(),
    dueAt: bigint('due_at', { mode: 'number' }).notNull(),
    attempts: integer('attempts').notNull().default(0),
    account: text('account'), // the API key's account (several keys): schema version 4
  },
  (t) => [
    // Schema version 5: no row of an older ipn-kit's sweep lock (transaction_id '') in a rolling deploy.
    check('ipn_kit_no_sweep_lock', sql`${t.transactionId} <> ''`),
  ],
);

/** The state each payment was decided in (a FAILED after a SUCCESSFUL is a conflict, not a `failed`). */
export const ipnInboxStates = pgTable('ipn_inbox_states', {
  transactionId: text('transaction_id').primaryKey(),
  state: text('state').notNull(),
  decidedAt: timestamp('decided_at', { withTimezone: true }).notNull().defaultNow(),
});

/** The operators' actions (replay, purge, pause), with who and when. */
export const ipnInboxAudit = pgTable('ipn_inbox_audit', {
  id: bigserial('id', { mode: 'number' }).primaryKey(),
  at: timestamp('at', { withTimezone: true }).notNull().defaultNow(),
  action: text('action').notNull(),
  actor: text('actor').notNull(),
  detail: json('detail').notNull(),
});

/**
 * The pause every instance reads (the row `paused`): schema version 3. The expectations sweep's lock (the
 * row `sweep`, its end in `until_ms`): schema version 5.
 */
export const ipnInboxControl = pgTable('ipn_inbox_control', {
  name: text('name').primaryKey(),
  value: text('value').notNull(),
  updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  untilMs: bigint('until_ms', { mode: 'number' }),
});

/** The keys claimed at most once (schema version 7): a claim and its token, apart from the inbox. */
export const ipnInboxClaims = pgTable(
  'ipn_inbox_claims',
  {
    key: text('key').primaryKey(),
    token: text('token').notNull(),
    claimedAt: timestamp('claimed_at', { withTimezone: true }).notNull().defaultNow(),
    expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
  },
  (t) => [index('ipn_inbox_claims_at_idx').on(t.claimedAt)],
);

/** The schema versions `store.migrate()` ran: it reads them to know what to run. */
export const ipnInboxSchema = pgTable('ipn_inbox_schema', {
  version: integer('version').primaryKey(),
  name: text('name').notNull(),
  appliedAt: timestamp('applied_at', { withTimezone: true }).notNull().defaultNow(),
});
// #endregion tables

// #region ledger
import { numeric } from 'drizzle-orm/pg-core';

/** Your ledger: no unique key needed, as ipn-kit delivers each notification once. */
export const ledger = pgTable('ledger', {
  transactionId: text('transaction_id').notNull(),
  orderId: text('order_id').notNull(),
  amount: numeric('amount'),
});

/** Your orders, with what you initiated: the transaction_id the service returned, and the amount. */
export const orders = pgTable('orders', {
  id: text('id').primaryKey(),
  transactionId: text('transaction_id').notNull(),
  amount: numeric('amount').notNull(),
  paidAt: timestamp('paid_at', { withTimezone: true }),
});
// #endregion ledger

// #region router
import { and, eq, isNull } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import type { Pool } from 'pg';
import { ipnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { drizzleTransactions } from 'ipn-kit/orm';

export function drizzleRouter(pool: Pool) {
  const db = drizzle({ client: pool });
  const store = new PostgresStore({ pool, transactions: drizzleTransactions(db) });
  const ipn = ipnRouter({ store, delivery: 'at-least-once' });
  ipn.on('successful', async (n, { tx }) => {
    // `tx` is Drizzle's transaction: what goes through it commits with the inbox's `delivered` mark,
    // or not at all (a failed attempt rolls it back, and the retry writes it again). No unique key needed.
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
    // Otherwise credit nothing: the throw rolls back; after its retries the notification is `dead` in the
    // inbox, for a person to look at (ipn.inbox, the operator's page).
    if (paid.length !== 1) throw new Error(`${n.transaction_id} is not the payment of order ${orderId}`);
    await tx.insert(ledger).values({ transactionId: n.transaction_id, orderId, amount: String(amount) });
  });
  return ipn;
}
// #endregion router

// #region dead-letters
import { desc, gte } from 'drizzle-orm'; // and, eq: imported for the router above
import type { NodePgDatabase } from 'drizzle-orm/node-postgres';

/** The notifications whose delivery gave up, newest first: for an operator's page of your own. */
export function deadNotifications(db: NodePgDatabase, since: Date) {
  return db
    .select({ key: ipnInbox.key, attempts: ipnInbox.attempts, lastError: ipnInbox.lastError })
    .from(ipnInbox)
    .where(and(eq(ipnInbox.status, 'dead'), gte(ipnInbox.receivedAt, since)))
    .orderBy(desc(ipnInbox.receivedAt));
}
// #endregion dead-letters
