/**
 * Type tests, checked by `npm run typecheck` (tsc --noEmit), never run: a listener's `tx` is Drizzle's or
 * Kysely's own transaction, typed for the user's schema, inferred from the client given to
 * `drizzleTransactions` or `kyselyTransactions`.
 */
import { drizzle } from 'drizzle-orm/node-postgres';
import { Kysely, PostgresDialect } from 'kysely';
import { Pool } from 'pg';
import { ipnRouter } from '../../lib/index.js';
import { PostgresStore } from '../../lib/postgres.js';
import { drizzleTransactions, kyselyTransactions } from '../../lib/orm.js';
import { ledger } from '../../examples/snippets/orm/drizzle.js';
import type { Database } from '../../examples/snippets/orm/kysely.js';

const pool = new Pool();

// Drizzle: tx is the PgTransaction of this database and schema.
const db = drizzle({ client: pool, schema: { ledger } });
const drizzleIpn = ipnRouter({
  store: new PostgresStore({ pool, transactions: drizzleTransactions(db) }),
  delivery: 'at-least-once',
});
drizzleIpn.on('successful', async (n, { tx, db: raw }) => {
  await tx.insert(ledger).values({ transactionId: n.transaction_id, orderId: 'o', amount: String(n.amount) });
  await tx.query.ledger.findMany({ where: (row, { eq }) => eq(row.transactionId, n.transaction_id) });
  await tx.transaction(async (nested) => {
    await nested.delete(ledger);
  });
  // @ts-expect-error a column the ledger does not have
  await tx.insert(ledger).values({ transactionId: 'x', orderId: 'o', paid: true });
  // @ts-expect-error orderId is NOT NULL: an insert needs it
  await tx.insert(ledger).values({ transactionId: 'x' });
  // @ts-expect-error a table the schema does not have
  await tx.query.orders.findMany();
  // With an ORM's transactions, no raw client beside tx.
  const none: undefined = raw;
  void none;
});

// Options: the config of db.transaction, as Drizzle types it.
drizzleTransactions(db, { config: { isolationLevel: 'serializable', accessMode: 'read write' } });
// @ts-expect-error not an isolation level of PostgreSQL
drizzleTransactions(db, { config: { isolationLevel: 'chaos' } });
// @ts-expect-error a pool is not a Drizzle database
drizzleTransactions(pool);

// Kysely: tx is the Transaction<Database> of this instance.
const kysely = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
const kyselyIpn = ipnRouter({
  store: new PostgresStore({ pool, transactions: kyselyTransactions(kysely) }),
  delivery: 'at-least-once',
});
kyselyIpn.on('successful', async (n, { tx }) => {
  await tx
    .insertInto('ledger')
    .values({ transaction_id: n.transaction_id, order_id: 'o', amount: n.amount })
    .execute();
  const rows = await tx.selectFrom('ipn_inbox').select(['key', 'status']).execute();
  const status: 'received' | 'delivered' | 'failed' | 'dead' | undefined = rows[0]?.status;
  void status;
  // @ts-expect-error a table the Database interface does not have
  await tx.insertInto('orders').values({ id: 'x' }).execute();
  // @ts-expect-error a column the ledger does not have
  await tx.insertInto('ledger').values({ transaction_id: 'x', order_id: 'o', paid: true }).execute();
});
// @ts-expect-error a Drizzle database is not a Kysely instance
kyselyTransactions(db);
