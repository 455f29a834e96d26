// A Cloudflare Worker with PostgresStore: wrangler.toml beside it sets nodejs_compat, and DATABASE_URL is a
// var or secret (`wrangler secret put DATABASE_URL`). Run by test/runtimes/workers-postgres.test.ts.
// #region worker-postgres
import { ipnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { Pool } from 'pg';

interface Env {
  DATABASE_URL: string;
  IPN_TABLE?: string; // the inbox table; 'ipn_inbox' when unset (create it once: store.migrate())
}

/** A router and your listeners, over this request's store. */
function router(store: PostgresStore<Pool>) {
  const ipn = ipnRouter({ store, delivery: 'at-least-once' });
  ipn.on('successful', async (n, { db }) => {
    // db: this delivery's transaction, committed with the 'delivered' mark. Only the order this transaction
    // was initiated for (custom_data), for its amount, and only once:
    const paid = await db.query(
      'UPDATE orders SET paid_at = now() WHERE id = $1 AND transaction_id = $2 AND amount = $3 AND paid_at IS NULL',
      [n.custom_data, n.transaction_id, n.amount],
    );
    // Otherwise credit nothing: the throw rolls back; the Cron Trigger's passes retry it, then it is `dead`.
    if (paid.rowCount !== 1)
      throw new Error(`${n.transaction_id} is not the payment of order ${n.custom_data}`);
    await db.query('INSERT INTO ledger (transaction_id, order_id, amount) VALUES ($1, $2, $3)', [
      n.transaction_id,
      n.custom_data,
      n.amount,
    ]);
  });
  return ipn;
}

/** This invocation's pool (Workers binds its sockets to the invocation), with its error listener. */
function poolFor(env: Env): Pool {
  const pool = new Pool({ connectionString: env.DATABASE_URL, max: 2 });
  // A dropped connection, logged, not thrown. After end(), pg-cloudflare reports its own socket's close as
  // "Stream was cancelled": not an error.
  pool.on('error', (error) => pool.ending || console.error('pg', error));
  return pool;
}

export default {
  // Everything per request: Workers binds a socket to the request that opened it, so a pool kept across
  // requests fails from the second one on. The store is an option of the router: the router too.
  async fetch(req: Request, env: Env, ctx: ExecutionContext): Promise<Response> {
    const pool = poolFor(env);
    const store = new PostgresStore({ pool, table: env.IPN_TABLE ?? 'ipn_inbox' });
    const ipn = router(store);
    const response = await ipn.fetch(req, ctx);
    // After the 200: close() waits for this request's delivery, then the pool's sockets are closed.
    ctx.waitUntil(ipn.close().finally(() => pool.end()));
    return response;
  },
  // A Cron Trigger (wrangler.toml: [triggers] crons = ["* * * * *"]) drives the retries: no timer outlives a
  // request here, so an attempt that failed, or that a request's end cut short, waits for this pass.
  scheduled(controller: unknown, env: Env, ctx: ExecutionContext): void {
    const pool = poolFor(env);
    const ipn = router(new PostgresStore({ pool, table: env.IPN_TABLE ?? 'ipn_inbox' }));
    const pass = ipn
      .drain({ budgetMs: 20_000 })
      .then((counts) => console.log('ipn drain', JSON.stringify(counts)));
    ctx.waitUntil(pass.finally(() => ipn.close()).finally(() => pool.end()));
  },
};
// #endregion worker-postgres

// The part of Workers' ExecutionContext this file uses: the project type-checks against Node's types.
interface ExecutionContext {
  waitUntil(promise: Promise<unknown>): void;
}
