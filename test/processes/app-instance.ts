/**
 * One instance of a partner app, in a process of its own, for the multi-process and crash tests: an IPN
 * router over a shared store, on a random loopback port. Run with `node --import tsx`; configured by the
 * INSTANCE environment variable (JSON); talks to the test over the IPC channel:
 * sends { type: 'ready', url }, { type: 'started', id } when a listener begins, answers 'count' with
 * { type: 'count', successful }.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import Redis from 'ioredis';
import { Pool } from 'pg';
import { createClient } from 'redis';
import { ipnRouter, type Store } from '../../lib/index.js';
import { PostgresStore } from '../../lib/postgres.js';
import { RedisStore } from '../../lib/redis.js';

interface InstanceConfig {
  store: 'ioredis' | 'node-redis' | 'postgres';
  delivery: 'at-most-once' | 'at-least-once';
  /** Redis key prefix or PostgreSQL table. */
  namespace: string;
  /** `count`: count events; `hang`: never settle (the process is to be killed); `credit`: insert a credit row. */
  listener: 'count' | 'hang' | 'credit';
  creditsTable?: string;
  leaseMs?: number;
  recoveryIntervalMs?: number;
}

const config = JSON.parse(process.env.INSTANCE ?? '{}') as InstanceConfig;
const send = (message: unknown) => process.send?.(message);

async function main(): Promise<void> {
  const pool = new Pool({ connectionString: process.env.DATABASE_URL, max: 4 });
  let store: Store;
  if (config.store === 'ioredis') {
    store = new RedisStore({ client: new Redis(process.env.REDIS_URL ?? ''), prefix: config.namespace });
  } else if (config.store === 'node-redis') {
    const client = createClient({ url: process.env.REDIS_URL });
    await client.connect();
    store = new RedisStore({ client, prefix: config.namespace });
  } else {
    store = new PostgresStore({ pool, table: config.namespace });
  }
  const ipn = ipnRouter({
    store,
    delivery: config.delivery,
    leaseMs: config.leaseMs,
    recoveryIntervalMs: config.recoveryIntervalMs,
  });
  let successful = 0;
  ipn.on('successful', async (n) => {
    successful += 1;
    send({ type: 'started', id: n.transaction_id });
    if (config.listener === 'hang') await new Promise(() => {});
    if (config.listener === 'credit') {
      // Idempotent by design, as an at-least-once listener must be: one credit per transaction.
      await pool.query(
        `INSERT INTO ${config.creditsTable} (transaction_id, order_id, amount) VALUES ($1, $2, $3)
         ON CONFLICT (transaction_id) DO NOTHING`,
        [n.transaction_id, n.custom_data, n.amount],
      );
    }
  });
  process.on('message', (message) => {
    if (message === 'count') send({ type: 'count', successful });
  });
  const server = createServer(ipn).listen(0, '127.0.0.1', () => {
    send({ type: 'ready', url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` });
  });
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
