/**
 * A partner app whose process dies (SIGKILL, by its own hand) right after the `CRASH_AT`-th write statement
 * of its PostgreSQL inbox committed: for the crash tests of test/integration/durable-faults.test.ts. Run
 * with `node --import tsx`; configured by the environment (DATABASE_URL, TABLE, CREDITS, CRASH_AT,
 * GENUINE: the service's record as JSON). At-least-once, with a `verify` source that answers GENUINE once
 * the test sends 'open' over IPC. Sends { type: 'ready', url } once it listens.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool } from 'pg';
import { ipnNotificationSchema, ipnRouter } from '../../lib/index.js';
import { PostgresStore } from '../../lib/postgres.js';
import { FaultyPool } from '../helpers/faulty-pool.js';

const pool = new Pool({ connectionString: process.env.DATABASE_URL, max: 4 });
pool.on('error', () => {});
const crashAt = Number(process.env.CRASH_AT);
const faulty = new FaultyPool(pool, 'crash', crashAt, () => process.kill(process.pid, 'SIGKILL'));
const genuine = ipnNotificationSchema.parse(JSON.parse(process.env.GENUINE ?? '{}'));

let open = (): void => {};
const opened = new Promise<void>((resolve) => (open = resolve));
process.on('message', (message) => {
  if (message === 'open') open();
});

const ipn = ipnRouter({
  store: new PostgresStore({ pool: faulty, table: process.env.TABLE }),
  delivery: 'at-least-once',
  verify: { getStatus: async () => (await opened, genuine) },
  leaseMs: 3_000, // long enough that a busy machine never fails an attempt by its lease
  recoveryIntervalMs: 2 ** 31 - 1, // only the recovery at start: the writes follow the requests
  logger: { debug() {}, info() {}, warn() {}, error() {} },
});
ipn.on('successful', async (n) => {
  await pool.query(`INSERT INTO ${process.env.CREDITS} (transaction_id, order_id) VALUES ($1, $2)`, [
    n.transaction_id,
    n.custom_data,
  ]);
});

const server = createServer(ipn).listen(0, '127.0.0.1', () => {
  process.send?.({ type: 'ready', url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` });
});
