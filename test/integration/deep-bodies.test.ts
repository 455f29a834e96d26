import express from 'express';
import Fastify from 'fastify';
import Redis from 'ioredis';
import { Pool } from 'pg';
import { ipnRouter, MemoryStore, type IpnRouter, type Options } from '../../lib/index.js';
import { ipnPlugin } from '../../lib/fastify.js';
import { PostgresStore } from '../../lib/postgres.js';
import { RedisStore } from '../../lib/redis.js';
import { MAX_DEPTH } from '../../lib/body/parse-body.js';
import docSuccess from '../fixtures/ipn-doc-success.json';
import docSuccessful from '../fixtures/ipn-doc-successful.json';
import { failedPayload, successfulPayload, uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, settle, type Running } from '../helpers/servers.js';
import { databaseUrl, describeWithService, eventually, redisUrl } from '../helpers/services.js';
import { until } from '../helpers/until.js';

// An unknown field nested tens of thousands of levels deep is valid JSON and passed the schema (unknown
// fields are kept as they arrive): a durable store copying it recursively then overflowed the stack, and
// at least once the service got 503 on every resend, forever. The body is refused as it is parsed instead.

const DEEP = 45_000;
/** `depth` arrays inside each other: `[[[]]]` is 3. */
const arrays = (depth: number) => `${'['.repeat(depth)}${']'.repeat(depth)}`;
/** `depth` objects inside each other: `{"a":{"a":{}}}` is 3. */
const objects = (depth: number) => `${'{"a":'.repeat(depth - 1)}{}${'}'.repeat(depth - 1)}`;
/** The JSON text of `payload` with one more field, `x`, holding `value` (JSON text). */
const withField = (payload: Record<string, unknown>, value: string) =>
  `${JSON.stringify(payload).slice(0, -1)},"x":${value}}`;
/** The body's own object is one level: a field holding `depth` levels makes a body `depth + 1` deep. */
const refusal = {
  error: 'invalid_fields',
  message: expect.stringContaining(`more than ${MAX_DEPTH} levels`),
  issues: [{ path: 'x', message: expect.stringContaining(`more than ${MAX_DEPTH} levels`) }],
};

const servers: Running[] = [];
const routers: IpnRouter[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => server.close()));
  await Promise.all(routers.splice(0).map((router) => router.close()));
});

/** A router with a recorder and a listener on each outcome; a limit that lets the deep bodies in. */
function router(options: Partial<Options> = {}) {
  const ipn = ipnRouter({ logger: quiet, limit: '1mb', retryDelayMs: 5, ...options });
  routers.push(ipn);
  ipn.on('successful', () => {});
  ipn.on('failed', () => {});
  return { ipn, recorder: recordEvents(ipn) };
}

async function serve(app: unknown): Promise<(body: string) => Promise<Response>> {
  const running = await listen(app);
  servers.push(running);
  return (body) =>
    fetch(running.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
}

/** Posts a deep body, then its genuine resend without the field; both answers and what was recorded. */
async function deepThenGenuine(
  post: (body: string) => Promise<Response>,
  recorder: ReturnType<typeof recordEvents>,
  deep: string,
) {
  const payload = uniquePayload();
  const refused = await post(withField(payload, deep));
  const answer = { status: refused.status, body: await refused.json() };
  await settle();
  const invalid = recorder.of('invalid');
  const genuine = await post(JSON.stringify(payload));
  return { payload, answer, invalid, genuine };
}

describe.each([
  ['arrays', arrays],
  ['objects', objects],
])('an unknown field of %s nested 45,000 levels deep', (_, nest) => {
  test.each([
    ['at-most-once', {}],
    ['at-least-once, MemoryStore', { store: new MemoryStore(), delivery: 'at-least-once' as const }],
  ])(
    '%s: answers 400 invalid_fields with an invalid event; the genuine copy is then delivered',
    async (_, options) => {
      const { ipn, recorder } = router(options);
      const post = await serve(ipn);
      const { answer, invalid, genuine, payload } = await deepThenGenuine(post, recorder, nest(DEEP));

      expect(answer).toEqual({ status: 400, body: refusal });
      expect(invalid).toEqual([
        expect.objectContaining({ reason: 'invalid_fields', status: 400, issues: refusal.issues }),
      ]);
      expect(genuine.status).toBe(200);
      await until(() => recorder.count('successful') === 1, 'the genuine copy delivered');
      expect(recorder.names().sort()).toEqual(['invalid', 'notification', 'successful']);
      expect(recorder.of('successful')[0]).toMatchObject({ transaction_id: payload.transaction_id });
    },
  );
});

describe(`the nesting bound (${MAX_DEPTH} levels, the body's own object included)`, () => {
  test.each([
    ['arrays', arrays],
    ['objects', objects],
  ])('a field of %s reaching the bound is kept under extra; one level more is refused', async (_, nest) => {
    const { ipn, recorder } = router({ store: new MemoryStore(), delivery: 'at-least-once' });
    const post = await serve(ipn);
    const atBound = await post(withField(uniquePayload(), nest(MAX_DEPTH - 1)));
    const over = await post(withField(uniquePayload(), nest(MAX_DEPTH)));
    await settle();

    expect([atBound.status, over.status]).toEqual([200, 400]);
    expect(await over.json()).toEqual(refusal);
    expect(recorder.of('successful')[0].extra.x).toEqual(JSON.parse(nest(MAX_DEPTH - 1)));
  });

  test("every sample notification (fixtures, the service's documentation) is accepted", async () => {
    const { ipn, recorder } = router();
    const post = await serve(ipn);
    const samples = [
      successfulPayload(),
      failedPayload(),
      docSuccess,
      docSuccessful,
      // custom_data holding JSON text, and a partner echo decoded as JSON: both a few levels deep at most.
      uniquePayload({ custom_data: '{"order":{"id":"o-1","lines":[{"sku":"a","qty":1}]}}' }),
      uniquePayload({ custom_data: { order: { id: 'o-2', lines: [{ sku: 'b' }] } } }),
    ];
    const statuses = [];
    for (const sample of samples) statuses.push((await post(JSON.stringify(sample))).status);
    expect(statuses).toEqual([200, 200, 200, 200, 200, 200]);
    expect(recorder.count('invalid')).toBe(0);
  });

  test('a body that is itself an array nested too deep is refused, the whole body named', async () => {
    const { ipn, recorder } = router();
    const post = await serve(ipn);
    const answer = await post(arrays(DEEP));
    await settle();
    expect(answer.status).toBe(400);
    expect(await answer.json()).toMatchObject({
      error: 'invalid_fields',
      issues: [{ path: '', message: expect.stringContaining(`more than ${MAX_DEPTH} levels`) }],
    });
    expect(recorder.names()).toEqual(['invalid']);
  });

  test('the invalid event never carries the deep value: a listener can serialise what it received', async () => {
    const { ipn, recorder } = router();
    const post = await serve(ipn);
    await post(withField(uniquePayload(), objects(DEEP)));
    await settle();
    const [event] = recorder.of('invalid');
    expect(() => JSON.stringify(event.received)).not.toThrow();
    expect(event.received).not.toHaveProperty('x');
    expect(event.received).toHaveProperty('transaction_id');
  });
});

describe('every transport refuses a deep body the same way', () => {
  test('Express, behind the host app own express.json()', async () => {
    const { ipn, recorder } = router();
    const app = express();
    app.use(express.json({ limit: '1mb' }));
    app.use('/', ipn);
    const post = await serve(app);
    const { answer, invalid, genuine } = await deepThenGenuine(post, recorder, objects(DEEP));
    expect(answer).toEqual({ status: 400, body: refusal });
    expect(invalid).toHaveLength(1);
    expect(genuine.status).toBe(200);
  });

  test('node:http, http.createServer(ipn)', async () => {
    const { ipn, recorder } = router();
    const post = await serve(ipn);
    const { answer, genuine } = await deepThenGenuine(post, recorder, arrays(DEEP));
    expect(answer).toEqual({ status: 400, body: refusal });
    expect(genuine.status).toBe(200);
  });

  test('ipn.fetch', async () => {
    const { ipn, recorder } = router();
    const post = (body: string) =>
      ipn.fetch(
        new Request('https://shop.example/ipn', {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body,
        }),
      );
    const { answer, invalid, genuine } = await deepThenGenuine(post, recorder, arrays(DEEP));
    expect(answer).toEqual({ status: 400, body: refusal });
    expect(invalid).toHaveLength(1);
    expect(genuine.status).toBe(200);
  });

  test('the Fastify plugin', async () => {
    const { ipn, recorder } = router();
    const app = Fastify();
    await app.register(ipnPlugin, { prefix: '/ipn', router: ipn });
    const address = await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const post = (body: string) =>
        fetch(`${address}/ipn`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      const { answer, invalid, genuine } = await deepThenGenuine(post, recorder, objects(DEEP));
      expect(answer).toEqual({ status: 400, body: refusal });
      expect(invalid).toHaveLength(1);
      expect(genuine.status).toBe(200);
    } finally {
      await app.close();
    }
  });
});

describeWithService('PostgreSQL', 'a deep body at least once, with PostgresStore', () => {
  let pool: Pool;
  const table = `deep_bodies_${process.pid}_${Date.now()}`;

  beforeAll(async () => {
    pool = new Pool({ connectionString: databaseUrl() });
    await new PostgresStore({ pool, table }).migrate();
  });
  afterAll(async () => {
    await pool?.query(`DROP TABLE IF EXISTS "${table}"`);
    await pool?.query(`DROP TABLE IF EXISTS "${table}_expected"`);
    await pool?.end();
  });

  test.each([
    ['arrays', arrays],
    ['objects', objects],
  ])(
    'a field of %s nested 45,000 deep: 400, nothing stored; the genuine copy is stored and delivered',
    async (_, nest) => {
      const store = new PostgresStore({ pool, table });
      const { ipn, recorder } = router({ store, delivery: 'at-least-once' });
      const post = await serve(ipn);
      const { answer, invalid, genuine, payload } = await deepThenGenuine(post, recorder, nest(DEEP));

      expect(answer).toEqual({ status: 400, body: refusal });
      expect(invalid).toHaveLength(1);
      expect(genuine.status).toBe(200);
      const key = `${String(payload.transaction_id)}:${String(payload.state)}`;
      const { rows } = await pool.query<{ record: Record<string, unknown> }>(
        `SELECT record FROM "${table}" WHERE transaction_id = $1`,
        [payload.transaction_id],
      );
      expect(rows).toHaveLength(1);
      expect(rows[0]?.record).not.toHaveProperty('x');
      await eventually('delivered', async () => (await ipn.inbox.get(key))?.status === 'delivered');
      expect(recorder.count('successful')).toBe(1);
    },
  );
});

describeWithService('Redis', 'a deep body at least once, with RedisStore', () => {
  let client: Redis;
  const prefix = `ipn-kit-test:deep:${process.pid}:${Date.now()}:`;

  beforeAll(() => {
    client = new Redis(redisUrl());
  });
  afterAll(async () => {
    const keys = await client.keys(`${prefix}*`);
    if (keys.length > 0) await client.del(...keys);
    client.disconnect();
  });

  test('a field of arrays nested 45,000 deep: 400; the genuine copy is stored and delivered', async () => {
    const store = new RedisStore({ client, prefix });
    const { ipn, recorder } = router({ store, delivery: 'at-least-once' });
    const post = await serve(ipn);
    const { answer, genuine, payload } = await deepThenGenuine(post, recorder, arrays(DEEP));

    expect(answer).toEqual({ status: 400, body: refusal });
    expect(genuine.status).toBe(200);
    const key = `${String(payload.transaction_id)}:${String(payload.state)}`;
    await eventually('delivered', async () => (await ipn.inbox.get(key))?.status === 'delivered');
    expect((await ipn.inbox.get(key))?.record).not.toHaveProperty('x');
    expect(recorder.count('successful')).toBe(1);
  });
});
