/**
 * A partner app for test/integration/drain-processes.test.ts. Run with `node --import tsx`; configured by the
 * environment: STORE (`postgres` or `redis`), NAMESPACE (the inbox table or key prefix), LEDGER (a
 * PostgreSQL table, or a Redis list), ROLE and LEASE_MS. At-least-once, its recovery timer effectively off
 * (`recoveryIntervalMs` of an hour).
 *
 * - ROLE=crash: listens on HTTP; its `successful` listener sends { type: 'started', id } and never settles,
 *   so that the test can SIGKILL it after the 200 and before the listener finished.
 * - ROLE=drain: no HTTP; its listener writes a ledger row (or list item) per delivery; on the IPC message
 *   'drain' it calls `ipn.drain()` once and sends { type: 'drained', counts }.
 *
 * Sends { type: 'ready', url? } once it can be used.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Redis } from 'ioredis';
import { Pool } from 'pg';
import { ipnRouter, type Store } from '../../lib/index.js';
import { PostgresStore } from '../../lib/postgres.js';
import { RedisStore } from '../../lib/redis.js';

const { STORE, NAMESPACE = '', LEDGER = '', ROLE, LEASE_MS } = process.env;
const send = (message: unknown): void => void process.send?.(message);

const pool =
  STORE === 'postgres' ? new Pool({ connectionString: process.env.DATABASE_URL, max: 2 }) : undefined;
const redis = STORE === 'redis' ? new Redis(process.env.REDIS_URL ?? '') : undefined;
const store: Store = pool
  ? new PostgresStore({ pool, table: NAMESPACE })
  : new RedisStore({ client: redis as Redis, prefix: NAMESPACE });

const ipn = ipnRouter({
  store,
  delivery: 'at-least-once',
  leaseMs: Number(LEASE_MS),
  recoveryIntervalMs: 3_600_000, // effectively off: only drain() takes the entry up
  logger: { debug() {}, info() {}, warn() {}, error() {} },
});

if (ROLE === 'crash') {
  ipn.on('successful', (n) => {
    send({ type: 'started', id: n.transaction_id });
    return new Promise<void>(() => {}); // never settles: the process is killed first
  });
  const server = createServer(ipn).listen(0, '127.0.0.1', () => {
    send({ type: 'ready', url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` });
  });
} else {
  ipn.on('successful', async (n) => {
    if (pool) await pool.query(`INSERT INTO ${LEDGER} (transaction_id) VALUES ($1)`, [n.transaction_id]);
    else await redis?.rpush(LEDGER, n.transaction_id);
  });
  process.on('message', (message) => {
    if (message !== 'drain') return;
    void ipn.drain().then((counts) => send({ type: 'drained', counts }));
  });
  send({ type: 'ready' });
}
