// A Supabase Edge Function (supabase/functions/ipn/index.ts): Deno, with PostgreSQL through PostgresStore.
// Run by test/runtimes/supabase.test.ts, with the permissions documented in docs/frameworks.md:
//   deno run --allow-net --allow-env=SUPABASE_DB_URL,DATABASE_URL,PG* supabase.ts
// #region supabase
import { Pool } from 'pg';
import { ipnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';

// Module scope: one pool, store and router per instance, kept across the requests it serves.
const pool = new Pool({
  connectionString: Deno.env.get('SUPABASE_DB_URL') ?? Deno.env.get('DATABASE_URL'), // Supabase sets the first
  max: 3,
  keepAlive: true,
  query_timeout: 10_000,
  connectionTimeoutMillis: 5_000,
});
// Without an error listener, pg ends the isolate when an idle connection drops.
pool.on('error', (error) => console.error('idle PostgreSQL connection lost', error));
// Its table is made once by a migration (supabase/migrations/), with the SQL of postgresSchemaSql().
const store = new PostgresStore({ pool });
const ipn = ipnRouter({ store, delivery: 'at-least-once' });

ipn.on('successful', async (n, { db }) => {
  // db: this delivery's transaction, committed with the inbox's `delivered` mark. Only the order this
  // transaction was initiated for (custom_data), for its amount, and only once:
  const paid = await db.query(
    'UPDATE orders SET paid_at = now() WHERE id = $1 AND transaction_id = $2 AND amount = $3 AND paid_at IS NULL',
    [n.custom_data, n.transaction_id, n.amount],
  );
  // Otherwise credit nothing: the throw rolls back; after its retries the notification is `dead`.
  if (paid.rowCount !== 1)
    throw new Error(`${n.transaction_id} is not the payment of order ${n.custom_data}`);
  await db.query('INSERT INTO ledger (transaction_id, order_id, amount) VALUES ($1, $2, $3)', [
    n.transaction_id,
    n.custom_data,
    n.amount,
  ]);
  console.log('credited', n.transaction_id);
});
ipn.on('error', ({ error, notification }) =>
  console.error('ipn', notification?.transaction_id, error.message),
);

// EdgeRuntime.waitUntil (Supabase's) keeps the function alive for the work after the 200: your listeners,
// and the inbox marking the notification delivered. Plain Deno has no EdgeRuntime and needs none.
Deno.serve((req) => ipn.fetch(req, globalThis.EdgeRuntime));
// #endregion supabase

// The globals this file uses, as Deno and Supabase define them: the project type-checks against Node's types.
declare global {
  var EdgeRuntime: { waitUntil(work: Promise<unknown>): void } | undefined;
}
declare const Deno: {
  env: { get(name: string): string | undefined };
  serve(handler: (req: Request) => Promise<Response>): unknown;
};
