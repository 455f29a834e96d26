import Redis from 'ioredis';
import { Pool } from 'pg';
import { PostgresStore } from '../../lib/postgres.js';
import { RedisStore } from '../../lib/redis.js';
import { startInstance, type Instance } from '../helpers/instances.js';
import { uniquePayload } from '../helpers/payloads.js';
import { postCopies } from '../helpers/servers.js';
import { databaseUrl, describeWithService, redisUrl } from '../helpers/services.js';

jest.setTimeout(60_000);

const suffix = `${process.pid}_${Date.now() % 100_000}`;
const instances: Instance[] = [];
afterEach(async () => {
  await Promise.all(instances.splice(0).map((instance) => instance.kill('SIGKILL')));
});

async function start(config: Record<string, unknown>): Promise<Instance> {
  const instance = await startInstance(config);
  instances.push(instance);
  return instance;
}

/** Posts `copies` copies of one notification at once, alternating between the instances. */
const fire = (targets: Instance[], payload: Record<string, unknown>, copies: number) =>
  postCopies(
    targets.map((instance) => instance.url),
    payload,
    copies,
    '',
  );

async function total(targets: Instance[]): Promise<number> {
  const counts = await Promise.all(targets.map((instance) => instance.successful()));
  return counts.reduce((sum, count) => sum + count, 0);
}

describeWithService('Redis', 'two app processes sharing one Redis', () => {
  afterAll(async () => {
    const redis = new Redis(redisUrl());
    const keys = await redis.keys(`mp-${suffix}-*`);
    if (keys.length > 0) await redis.del(...keys);
    redis.disconnect();
  });

  test.each(['ioredis', 'node-redis'])(
    'with %s: 40 concurrent copies of one notification to both give exactly one event in total',
    async (client) => {
      const config = {
        store: client,
        delivery: 'at-most-once',
        namespace: `mp-${suffix}-${client}:`,
        listener: 'count',
      };
      const pair = [await start(config), await start(config)];
      const payload = uniquePayload();
      expect(await fire(pair, payload, 40)).toEqual(Array(40).fill(200));
      expect(await total(pair)).toBe(1);
      expect((await Promise.all(pair.map((instance) => instance.successful()))).sort()).toEqual([0, 1]);
    },
  );

  test.each(['ioredis', 'node-redis'])(
    'with %s at least once: a process killed (SIGKILL) after its 200, before its listener finished: another delivers it once',
    async (client) => {
      const namespace = `mp-${suffix}-alo-${client}:`;
      const config = {
        store: client,
        delivery: 'at-least-once',
        namespace,
        leaseMs: 1_500,
        recoveryIntervalMs: 200,
      };
      const doomed = await start({ ...config, listener: 'hang' });
      const payload = uniquePayload();
      const key = `${String(payload.transaction_id)}:SUCCESSFUL`;
      expect(await fire([doomed], payload, 1)).toEqual([200]); // acknowledged: the service will not resend
      await doomed.started(payload.transaction_id as string);
      await doomed.kill('SIGKILL');

      const redis = new Redis(redisUrl());
      const inbox = new RedisStore({ client: redis, prefix: namespace });
      try {
        expect((await inbox.get(key))?.status).toBe('received');
        const survivor = await start({ ...config, listener: 'count' });
        await expectEventually(async () => (await inbox.get(key))?.status === 'delivered');
        expect(await survivor.successful()).toBe(1);
        expect((await inbox.get(key))?.attempts).toBe(2);
        // A late resend changes nothing.
        expect(await fire([survivor], payload, 3)).toEqual([200, 200, 200]);
        expect(await survivor.successful()).toBe(1);
      } finally {
        redis.disconnect();
      }
    },
  );
});

describeWithService('PostgreSQL', 'app processes sharing one PostgreSQL', () => {
  const pool = new Pool({ connectionString: databaseUrl(), max: 4 });
  const table = `ipn_mp_${suffix}`;
  const credits = `credits_mp_${suffix}`;

  beforeAll(async () => {
    await new PostgresStore({ pool, table }).migrate();
    await pool.query(
      `CREATE TABLE ${credits} (transaction_id text PRIMARY KEY, order_id text NOT NULL, amount numeric)`,
    );
  });
  afterAll(async () => {
    await pool.query(`DROP TABLE IF EXISTS ${table}, ${table}_claims, ${credits}`);
    await pool.end();
  });

  test.each(['at-most-once', 'at-least-once'])(
    '%s: 40 concurrent copies of one notification to two processes give exactly one event in total',
    async (delivery) => {
      const config = { store: 'postgres', delivery, namespace: table, listener: 'count' };
      const pair = [await start(config), await start(config)];
      const payload = uniquePayload();
      expect(await fire(pair, payload, 40)).toEqual(Array(40).fill(200));
      const key = `${String(payload.transaction_id)}:SUCCESSFUL`;
      if (delivery === 'at-least-once')
        await expectEventually(async () => (await status(key)) === 'delivered');
      expect(await total(pair)).toBe(1);
      // At most once, the key is a claim, in <table>_claims (schema version 7); at least once, an entry.
      const where = delivery === 'at-most-once' ? `${table}_claims` : table;
      const { rows } = await pool.query(`SELECT count(*)::int AS n FROM ${where} WHERE key = $1`, [key]);
      expect(rows[0].n).toBe(1);
    },
  );

  test('a process killed (SIGKILL) after its 200, before its listener finished: another process delivers it, one credit', async () => {
    const config = {
      store: 'postgres',
      delivery: 'at-least-once',
      namespace: table,
      creditsTable: credits,
      leaseMs: 1_500,
      recoveryIntervalMs: 200,
    };
    const doomed = await start({ ...config, listener: 'hang' });
    const payload = uniquePayload({ custom_data: 'order-crash-1' });
    const key = `${String(payload.transaction_id)}:SUCCESSFUL`;

    expect(await fire([doomed], payload, 1)).toEqual([200]); // acknowledged: the service will not resend
    await doomed.started(payload.transaction_id as string);
    await doomed.kill('SIGKILL');
    expect(await status(key)).toBe('received');
    expect(await creditsFor(payload.transaction_id as string)).toBe(0);

    const survivor = await start({ ...config, listener: 'credit' });
    await expectEventually(async () => (await status(key)) === 'delivered');
    expect(await creditsFor(payload.transaction_id as string)).toBe(1);
    const { rows } = await pool.query(`SELECT attempts FROM ${table} WHERE key = $1`, [key]);
    expect(rows[0].attempts).toBe(2);

    // A late resend of the same notification changes nothing.
    expect(await fire([survivor], payload, 3)).toEqual([200, 200, 200]);
    expect(await creditsFor(payload.transaction_id as string)).toBe(1);
    expect(await survivor.successful()).toBe(1);
  });

  async function status(key: string): Promise<string | undefined> {
    const { rows } = await pool.query(`SELECT status FROM ${table} WHERE key = $1`, [key]);
    return rows[0]?.status as string | undefined;
  }
  async function creditsFor(id: string): Promise<number> {
    const { rows } = await pool.query(`SELECT count(*)::int AS n FROM ${credits} WHERE transaction_id = $1`, [
      id,
    ]);
    return rows[0].n as number;
  }
});

async function expectEventually(condition: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 15_000;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error('the condition never held');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
