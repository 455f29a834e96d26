/**
 * Several instances of a partner app behind a load balancer, sharing one store, so that a notification and
 * its resends are handled once in total, whichever instance each copy reaches.
 *
 * - With Redis (`ipn-kit/redis`): shared dedupe, at-most-once delivery (as with the memory store).
 * - With PostgreSQL (`ipn-kit/postgres`): shared dedupe and a durable inbox, at-least-once delivery: the
 *   notification is stored before the 200, and one whose listener failed, or whose process died, is
 *   delivered again (by any instance) until a listener succeeds.
 *
 * Run it with `npx tsx examples/multi-instance.ts` (Redis and PostgreSQL on their usual local ports, or
 * REDIS_URL / DATABASE_URL): it starts two instances of each kind and sends each pair one payment's copies.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import Redis from 'ioredis';
import { Pool } from 'pg';
import { ipnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { RedisStore } from 'ipn-kit/redis';

/** Credits one order; must be idempotent for at-least-once delivery (a retry may repeat it). */
export type Credit = (transactionId: string, orderId: string, amount: number | null) => Promise<void>;

/** One instance with a Redis store: dedupe shared by every instance, at-most-once. */
export function redisInstance(redis: Redis, credit: Credit) {
  const ipn = ipnRouter({ store: new RedisStore({ client: redis, prefix: 'shop:ipn:' }) });
  ipn.on('successful', (n) => credit(n.transaction_id, n.custom_data, n.amount));
  ipn.on('error', ({ error, notification }) => console.error(error.message, notification?.transaction_id));
  const app = express();
  app.use('/ipn', ipn);
  return { app, ipn };
}

/** One instance with PostgreSQL: dedupe shared, notifications stored before the 200, at-least-once. */
export function postgresInstance(pool: Pool, credit: Credit) {
  const ipn = ipnRouter({ store: new PostgresStore({ pool }), delivery: 'at-least-once' });
  // Awaited: the notification is marked delivered only when this resolves; a rejection is retried later.
  ipn.on('successful', (n) => credit(n.transaction_id, n.custom_data, n.amount));
  ipn.on('dead', ({ key, lastError }) => console.error(`gave up on ${key}: ${lastError}; replay it later`));
  const app = express();
  app.use('/ipn', ipn);
  return { app, ipn };
}

/** Runs two instances of each kind and sends three copies of one payment to each pair. */
export async function main(): Promise<{ redisCredits: number; postgresCredits: number }> {
  const redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
  const pool = new Pool({
    connectionString: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test',
  });
  pool.on('error', (error) => console.error('idle PostgreSQL client failed:', error.message));
  await new PostgresStore({ pool }).migrate(); // or run postgresSchemaSql() in your own migrations

  // Every credit call, to show each payment is credited once in total across the instances.
  const credited = { redis: [] as string[], postgres: [] as string[] };
  const servers: Server[] = [];
  const start = async (app: express.Express) => {
    const server = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    servers.push(server);
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}/ipn`;
  };
  const creditInto =
    (ledger: string[]): Credit =>
    async (transactionId) => {
      await Promise.resolve(); // your ledger's write, keyed by transactionId so that a retry is harmless
      ledger.push(transactionId);
    };
  try {
    const onRedis = [
      redisInstance(redis, creditInto(credited.redis)),
      redisInstance(redis, creditInto(credited.redis)),
    ];
    const onPostgres = [
      postgresInstance(pool, creditInto(credited.postgres)),
      postgresInstance(pool, creditInto(credited.postgres)),
    ];
    const redisUrls = await Promise.all(onRedis.map(({ app }) => start(app)));
    const postgresUrls = await Promise.all(onPostgres.map(({ app }) => start(app)));
    const transactionId = `EFB.${Date.now()}`;
    const body = JSON.stringify({
      transaction_id: transactionId,
      state: 'SUCCESSFUL',
      custom_data: 'order-7',
      amount: 5000,
    });
    const send = (url: string) =>
      fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    // The service's copies, spread over the instances by the load balancer, some at the same moment.
    await Promise.all([...redisUrls, redisUrls[0] as string].map(send));
    await Promise.all([...postgresUrls, postgresUrls[1] as string].map(send));
    for (let wait = 0; wait < 100 && credited.postgres.length === 0; wait += 1)
      await new Promise((r) => setTimeout(r, 20));
    await Promise.all([...onRedis, ...onPostgres].map(({ ipn }) => ipn.close()));
    await pool.query('DELETE FROM ipn_inbox WHERE transaction_id = $1', [transactionId]);
    await redis.del(`shop:ipn:${transactionId}:SUCCESSFUL`);
    return { redisCredits: credited.redis.length, postgresCredits: credited.postgres.length };
  } finally {
    for (const server of servers) {
      server.closeAllConnections();
      server.close();
    }
    redis.disconnect();
    await pool.end();
  }
}

if (process.argv[1] !== undefined && /multi-instance(\.[cm]?[jt]s)?$/.test(process.argv[1])) {
  main().then(
    ({ redisCredits, postgresCredits }) =>
      console.log(
        `3 copies to 2 instances each: Redis ${redisCredits} credit, PostgreSQL ${postgresCredits} credit`,
      ),
    (error: unknown) => {
      console.error(error);
      process.exitCode = 1;
    },
  );
}
