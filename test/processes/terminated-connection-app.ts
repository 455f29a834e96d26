/**
 * A partner app whose delivery transaction's connection is terminated by the server while its listener
 * works (as `pg_terminate_backend`, a failover, `idle_in_transaction_session_timeout` or
 * `idle_session_timeout` do), for test/integration/transactional-delivery.test.ts. Run with
 * `node --import tsx`; configured by the CONFIG environment variable (JSON: table, ledger, mode); sends
 * { type: 'ready', url } over IPC. The first attempt's listener terminates its own `db`'s backend through
 * another connection, then goes on working for a moment; `mode` says whether it wrote through `db` first.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool } from 'pg';
import { ipnRouter } from '../../lib/index.js';
import { PostgresStore } from '../../lib/postgres.js';

const config = JSON.parse(process.env.CONFIG ?? '{}') as {
  table: string;
  ledger: string;
  mode: 'write' | 'none';
};

function main(): void {
  const pool = new Pool({ connectionString: process.env.DATABASE_URL, max: 4 });
  pool.on('error', () => {}); // as the docs ask: an idle connection lost is not a crash
  const ipn = ipnRouter({
    store: new PostgresStore({ pool, table: config.table }),
    delivery: 'at-least-once',
    leaseMs: 2_000,
    recoveryIntervalMs: 100,
    retryDelayMs: 20,
  });
  let first = true;
  ipn.on('successful', async (n, { db }) => {
    if (config.mode === 'write') {
      await db.query(`INSERT INTO ${config.ledger} (transaction_id) VALUES ($1)`, [n.transaction_id]);
    }
    if (!first) return;
    first = false;
    await pool.query('SELECT pg_terminate_backend($1)', [(db as unknown as { processID: number }).processID]);
    await new Promise((resolve) => setTimeout(resolve, 300)); // other work: an HTTP call, say
  });
  const server = createServer(ipn).listen(0, '127.0.0.1', () => {
    process.send?.({ type: 'ready', url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` });
  });
}

main();
