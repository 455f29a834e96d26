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

ipn.on('successful', (payment) => {
  // Credit the order here (a throw is retried: the inbox keeps the notification until a listener succeeds).
  console.log('credited', payment.transaction_id);
});

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
