import { randomUUID } from 'node:crypto';
import express from 'express';
import Redis from 'ioredis';
import { Pool } from 'pg';
import { createClient } from 'redis';
import request from 'supertest';
import { ipnRouter, type Store } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { RedisStore } from 'ipn-kit/redis';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, type Running } from '../helpers/servers.js';
import {
  databaseUrl,
  describeWithService,
  eventually,
  hostAndPort,
  redisUrl,
  viaPort,
} from '../helpers/services.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';

/**
 * A store whose client reaches the service through a proxy, so that the test can cut the service off and
 * bring it back. `disconnected` and `connected` resolve once the client has noticed: the outage is then
 * certain to be seen by the next request, and the recovery by the one after it.
 */
interface Backend {
  store: Store;
  disconnected: () => Promise<void>;
  connected: () => Promise<void>;
  dispose: () => Promise<void>;
}

const prefix = `ipn-kit-test:store-outage:${process.pid}:`;

/** ioredis, told not to queue commands while it reconnects: a claim then fails at once instead of waiting. */
async function ioredisBackend(proxy: TcpProxy): Promise<Backend> {
  const client = new Redis(viaPort(redisUrl(), proxy.port), {
    lazyConnect: true,
    enableOfflineQueue: false,
    autoResendUnfulfilledCommands: false,
    maxRetriesPerRequest: 0,
    connectTimeout: 1000,
    retryStrategy: () => 20,
  });
  client.on('error', () => {});
  await client.connect();
  return {
    store: new RedisStore({ client, prefix }),
    disconnected: () => eventually('ioredis sees the outage', () => client.status !== 'ready'),
    connected: () => eventually('ioredis reconnects', () => client.status === 'ready'),
    dispose: async () => {
      const keys = await client.keys(`${prefix}*`);
      if (keys.length > 0) await client.del(...keys);
      await client.quit();
    },
  };
}

/** node-redis, also without its offline queue. */
async function nodeRedisBackend(proxy: TcpProxy): Promise<Backend> {
  const client = createClient({
    url: viaPort(redisUrl(), proxy.port),
    disableOfflineQueue: true,
    socket: { connectTimeout: 1000, reconnectStrategy: () => 20 },
  });
  client.on('error', () => {});
  await client.connect();
  return {
    store: new RedisStore({ client, prefix }),
    disconnected: () => eventually('node-redis sees the outage', () => !client.isReady),
    connected: () => eventually('node-redis reconnects', () => client.isReady),
    dispose: async () => {
      const keys = await client.keys(`${prefix}*`);
      if (keys.length > 0) await client.del(keys);
      await client.close();
    },
  };
}

/** A pg pool; it connects afresh for each query once its idle connections were cut, so it needs no waiting. */
async function postgresBackend(proxy: TcpProxy): Promise<Backend> {
  const pool = new Pool({
    connectionString: viaPort(databaseUrl(), proxy.port),
    max: 2,
    connectionTimeoutMillis: 1000,
  });
  pool.on('error', () => {}); // the proxy cutting an idle connection
  const table = `ipn_test_outage_${process.pid}_${randomUUID().slice(0, 8)}`;
  const store = new PostgresStore({ pool, table });
  await store.migrate();
  return {
    store,
    disconnected: () => eventually('the pool drops its cut connections', () => pool.totalCount === 0),
    connected: () => Promise.resolve(),
    dispose: async () => {
      await pool.query(`DROP TABLE IF EXISTS "${table}"`);
      await pool.end();
    },
  };
}

function outageSuite(
  backendOf: (proxy: TcpProxy) => Promise<Backend>,
  target: () => { host: string; port: number },
) {
  let proxy: TcpProxy;
  let backend: Backend;
  let running: Running;
  let ipn: ReturnType<typeof ipnRouter>;
  let recorder: ReturnType<typeof recordEvents>;

  beforeAll(async () => {
    proxy = await TcpProxy.open(target());
    backend = await backendOf(proxy);
    ipn = ipnRouter({ store: backend.store, logger: quiet, storeTimeout: 500 });
    recorder = recordEvents(ipn);
    const app = express();
    app.use('/ipn', ipn);
    running = await listen(app);
  });

  afterAll(async () => {
    await running?.close();
    // The client tidies up and quits through the proxy: bring it back, in case the test stopped midway.
    await proxy?.start();
    await backend?.connected();
    await backend?.dispose();
    await proxy?.close();
  });

  test('answers 503 while the store is unreachable, and recovers by itself once it is back', async () => {
    const before = uniquePayload();
    const during = uniquePayload();

    // Working.
    expect((await request(running.url).post('/ipn').send(before)).status).toBe(200);
    expect(recorder.count('successful')).toBe(1);

    // Outage: refused connections.
    await proxy.stop();
    await backend.disconnected();
    const refused = await request(running.url).post('/ipn').send(during);

    expect(refused.status).toBe(503);
    expect(refused.headers['retry-after']).toBe('30');
    expect(refused.body).toMatchObject({ error: 'store_unavailable' });
    const errors = recorder.of('error');
    expect(errors).toHaveLength(1);
    expect(errors[0].error.code).toBe('IPN_STORE_FAILED');
    expect(errors[0].notification.transaction_id).toBe(during.transaction_id);
    expect(recorder.count('successful')).toBe(1); // still only the first

    // Recovery: the service's resend of the same notification goes through, once.
    await proxy.start();
    await backend.connected();
    const resent = await request(running.url).post('/ipn').send(during);

    expect(resent.status).toBe(200);
    expect(resent.body).toEqual({ ok: true });
    const delivered = recorder.of('successful').filter((n) => n.transaction_id === during.transaction_id);
    expect(delivered).toHaveLength(1);

    const again = await request(running.url).post('/ipn').send(during);
    expect(again.body).toEqual({ ok: true, duplicate: true });
    expect(recorder.count('successful')).toBe(2);
    expect(recorder.count('error')).toBe(1);
  });
}

describeWithService('Redis', 'a store outage with RedisStore over ioredis', () => {
  outageSuite(ioredisBackend, () => hostAndPort(redisUrl(), 6379));
});

describeWithService('Redis', 'a store outage with RedisStore over node-redis', () => {
  outageSuite(nodeRedisBackend, () => hostAndPort(redisUrl(), 6379));
});

describeWithService('PostgreSQL', 'a store outage with PostgresStore', () => {
  outageSuite(postgresBackend, () => hostAndPort(databaseUrl(), 5432));
});

describeWithService(
  'PostgreSQL',
  'a network that drops packets, with the pool settings the docs give',
  () => {
    test('the router answers 503 during the stall and 200 again once the network heals', async () => {
      const proxy = await TcpProxy.open(hostAndPort(databaseUrl(), 5432));
      // The settings of examples/snippets/postgres-store.ts; one connection, so that a stuck one would block all.
      const pool = new Pool({
        connectionString: viaPort(databaseUrl(), proxy.port),
        max: 1,
        keepAlive: true,
        query_timeout: 1_000,
        connectionTimeoutMillis: 1_000,
      });
      pool.on('error', () => {});
      const table = `ipn_test_stall_${process.pid}_${randomUUID().slice(0, 8)}`;
      const store = new PostgresStore({ pool, table });
      const ipn = ipnRouter({ store, logger: quiet, storeTimeout: 500 });
      const running = await listen(ipn);
      try {
        await store.migrate();
        expect((await request(running.url).post('/').send(uniquePayload())).status).toBe(200);

        proxy.stall();
        const during = uniquePayload();
        expect((await request(running.url).post('/').send(during)).status).toBe(503);
        proxy.heal();

        // The service resends: the query stuck on the dead connection times out, pg drops that connection,
        // and a new one carries the resend. Without query_timeout it would hold the only connection for good.
        await eventually('a resend answered 200', async () => {
          return (await request(running.url).post('/').send(during)).status === 200;
        });
      } finally {
        await running.close();
        await ipn.close();
        await pool.query(`DROP TABLE IF EXISTS "${table}"`).catch(() => {});
        await pool.end();
        await proxy.close();
      }
    }, 30_000);
  },
);
