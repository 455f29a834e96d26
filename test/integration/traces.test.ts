import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import Redis from 'ioredis';
import { createPool } from 'mysql2/promise';
import { Pool } from 'pg';
import { context, SpanKind, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import { ipnRouter, MemoryStore, type IpnRouter, type Options } from '../../lib/index.js';
import { MysqlStore } from '../../lib/mysql.js';
import { PostgresStore } from '../../lib/postgres.js';
import { SqliteStore } from '../../lib/sqlite.js';
import { RedisStore } from '../../lib/redis.js';
import type { DurableStore } from '../../lib/stores/store.js';
import { ipnNotificationSchema } from '../../lib/notification/schema.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { databaseUrl, describeWithService, eventually, mysqlUrl, redisUrl } from '../helpers/services.js';
import { CLEANUP_TIMEOUT_MS, dropMysqlInboxes, dropPostgresInboxes } from '../helpers/drop-inboxes.js';

/**
 * OpenTelemetry traces with the real SDK (in-memory exporter, AsyncLocalStorage context manager), over the
 * durable stores: the request's span under the HTTP server span, each delivery attempt's span (a child of
 * the request's in this process, linked to it through the inbox after a restart), the status query's span,
 * and no customer data in any attribute. With no tracer provider registered, nothing is made and the inbox
 * keeps the record as received.
 */

jest.setTimeout(30_000);

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const contextManager = new AsyncLocalStorageContextManager();
const appTracer = () => trace.getTracer('the-app');

function register(): void {
  context.setGlobalContextManager(contextManager.enable());
  trace.setGlobalTracerProvider(provider);
}
function unregister(): void {
  trace.disable();
  context.disable();
}
beforeAll(register);
afterAll(async () => {
  unregister();
  await provider.shutdown();
});
beforeEach(() => exporter.reset());

const keyOf = (payload: Record<string, unknown>) =>
  `${String(payload.transaction_id)}:${String(payload.state)}`;
const spans = (name: string, transactionId: string): ReadableSpan[] =>
  exporter
    .getFinishedSpans()
    .filter((span) => span.name === name && span.attributes['ipn.transaction_id'] === transactionId);
const parentOf = (span: ReadableSpan): string | undefined => span.parentSpanContext?.spanId;

/** Serves `ipn` behind an HTTP server span, as the app's HTTP instrumentation would make. */
async function serve(ipn: IpnRouter) {
  const server = createServer((req, res) => {
    const span = appTracer().startSpan('POST /ipn', { kind: SpanKind.SERVER });
    res.on('finish', () => span.end());
    context.with(trace.setSpan(context.active(), span), () => void ipn(req, res));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const post = (body: unknown) =>
    fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  const close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return { post, close };
}

function scenarios(
  fresh: () => Promise<DurableStore> | DurableStore,
  reopen: (store: DurableStore) => DurableStore,
) {
  const opened: Array<{ close(): Promise<void> }> = [];
  afterEach(async () => {
    for (const one of opened.splice(0).reverse()) await one.close();
  });
  async function start(store: DurableStore, options: Partial<Options> = {}) {
    const ipn = ipnRouter({
      store,
      delivery: 'at-least-once',
      logger: quiet,
      retryDelayMs: 5,
      recoveryIntervalMs: 20,
      ...options,
    });
    const served = await serve(ipn);
    opened.push({ close: () => ipn.close() }, served);
    return { ipn, ...served };
  }

  test('a span per request under the HTTP server span, its delivery attempt a child, no customer data', async () => {
    const store = await fresh();
    const payload = uniquePayload({ customer_name: 'Awa Traore', destination: '0700112233' });
    const id = String(payload.transaction_id);
    const record = ipnNotificationSchema.parse(payload);
    const { ipn, post } = await start(store, { verify: { getStatus: () => Promise.resolve(record) } });
    const credited: string[] = [];
    ipn.on('successful', (n) => {
      // The partner's own work, traced by the app: a child of the delivery attempt's span.
      appTracer().startSpan('credit the order').end();
      credited.push(n.transaction_id);
    });

    expect((await post(payload)).status).toBe(200);
    await eventually('delivered', async () => (await store.get(keyOf(payload)))?.status === 'delivered');
    await eventually('the attempt span', () => spans('ipn.deliver', id).length === 1);

    const server = exporter.getFinishedSpans().find((span) => span.name === 'POST /ipn')!;
    const [request] = spans('ipn.request', id);
    const [attempt] = spans('ipn.deliver', id);
    const [query] = spans('ipn.status_query', id);
    expect(request).toBeDefined();
    expect(parentOf(request!)).toBe(server.spanContext().spanId);
    expect(request!.kind).toBe(SpanKind.INTERNAL); // the HTTP server span is the SERVER one
    expect(request!.spanContext().traceId).toBe(server.spanContext().traceId);
    expect(request!.attributes).toEqual({
      'ipn.transaction_id': id,
      'ipn.state': 'SUCCESSFUL',
      'ipn.delivery_key': keyOf(payload),
      'http.response.status_code': 200,
      'ipn.outcome': 'accepted',
    });
    expect(parentOf(attempt!)).toBe(request!.spanContext().spanId);
    expect(attempt!.spanContext().traceId).toBe(server.spanContext().traceId);
    expect(attempt!.attributes).toEqual({
      'ipn.transaction_id': id,
      'ipn.state': 'SUCCESSFUL',
      'ipn.delivery_key': keyOf(payload),
      'ipn.attempt': 1,
      'ipn.outcome': 'delivered',
    });
    // The verification's status query, made by the attempt; the listener's own span, under the attempt.
    expect(parentOf(query!)).toBe(attempt!.spanContext().spanId);
    expect(query!.attributes).toMatchObject({ 'ipn.state': 'SUCCESSFUL', 'ipn.outcome': 'answered' });
    const credit = exporter.getFinishedSpans().find((span) => span.name === 'credit the order')!;
    expect(parentOf(credit)).toBe(attempt!.spanContext().spanId);
    expect(credited).toEqual([id]);

    // Never the customer's name or number, in any span.
    const everything = JSON.stringify(
      exporter.getFinishedSpans().map((span) => [span.attributes, span.status]),
    );
    expect(everything).not.toContain('Awa Traore');
    expect(everything).not.toContain('0700112233');
  });

  test('a retry after a restart is linked to the request through the inbox, and listeners never see the link', async () => {
    const store = await fresh();
    const payload = uniquePayload();
    const id = String(payload.transaction_id);
    // The first process: its listener fails, and it stops before the retry.
    const first = await start(store, { retryDelayMs: 300 });
    first.ipn.on('successful', () => Promise.reject(new Error('ledger down')));
    expect((await first.post(payload)).status).toBe(200);
    await eventually('the failed attempt', () => spans('ipn.deliver', id).length === 1);
    await first.ipn.close();
    const [request] = spans('ipn.request', id);
    const [failed] = spans('ipn.deliver', id);
    expect(failed!.attributes).toMatchObject({ 'ipn.attempt': 1, 'ipn.outcome': 'retried' });
    expect(failed!.status).toEqual({ code: 2, message: expect.stringContaining('ledger down') });
    // What the inbox keeps: the request span's traceparent, beside the record.
    const kept = (await store.get(keyOf(payload)))!.record;
    const { spanId, traceId } = request!.spanContext();
    expect(kept.ipn_kit_traceparent).toBe(`00-${traceId}-${spanId}-01`);

    // The next process, over the same inbox, takes the entry up and delivers it.
    const heard: unknown[] = [];
    const second = await start(reopen(store));
    second.ipn.on('successful', (n) => void heard.push(n));
    await eventually(
      'delivered after the restart',
      async () => (await store.get(keyOf(payload)))?.status === 'delivered',
    );
    await eventually('the second attempt span', () => spans('ipn.deliver', id).length === 2);
    const retry = spans('ipn.deliver', id).find((span) => span.attributes['ipn.attempt'] === 2)!;
    expect(retry.attributes).toMatchObject({
      'ipn.outcome': 'delivered',
      'ipn.delivery_key': keyOf(payload),
    });
    expect(retry.links.map((link) => link.context)).toEqual([expect.objectContaining({ traceId, spanId })]);
    expect(parentOf(retry)).toBeUndefined(); // its own trace, taken up by the recovery timer
    expect(JSON.stringify(heard)).not.toContain('traceparent');
    expect(heard).toHaveLength(1);
  });

  test("a notification's own ipn_kit_traceparent field (not the service's) is never kept, linked, or shown to listeners", async () => {
    const forgedTrace = 'f'.repeat(32);
    const forged = `00-${forgedTrace}-${'e'.repeat(16)}-01`;
    const heard: string[] = [];
    let healthy = false;
    const store = await fresh();
    const { ipn, post } = await start(store, { retryDelayMs: 5, maxAttempts: 50 });
    ipn.on('successful', (n) => {
      heard.push(JSON.stringify(n));
      // An attempt begun before a provider was registered has no span: it fails too, for a traced one to deliver.
      if (!healthy || trace.getActiveSpan() === undefined) return Promise.reject(new Error('ledger down'));
    });

    // With a provider: the request's own traceparent is kept, not the sender's.
    const traced = uniquePayload({ ipn_kit_traceparent: forged });
    const id = String(traced.transaction_id);
    expect((await post(traced)).status).toBe(200);
    await eventually('a failed attempt', () => heard.length >= 1);
    healthy = true;
    await eventually('delivered', async () => (await store.get(keyOf(traced)))?.status === 'delivered');
    await eventually('the delivered attempt span', () =>
      spans('ipn.deliver', id).some((span) => span.attributes['ipn.outcome'] === 'delivered'),
    );
    const [request] = spans('ipn.request', id);
    const { traceId, spanId } = request!.spanContext();
    expect((await store.get(keyOf(traced)))!.record.ipn_kit_traceparent).toBe(`00-${traceId}-${spanId}-01`);
    for (const span of spans('ipn.deliver', id)) {
      expect(span.links.map((link) => link.context.traceId)).not.toContain(forgedTrace);
      expect(span.spanContext().traceId).not.toBe(forgedTrace);
    }

    // Without one when it arrived: nothing is kept, and a retry made once a provider is registered links to nothing.
    healthy = false;
    const seen = heard.length;
    unregister();
    const bare = uniquePayload({ ipn_kit_traceparent: forged });
    try {
      expect((await post(bare)).status).toBe(200);
      await eventually('a failed attempt', () => heard.length > seen);
      expect(Object.keys((await store.get(keyOf(bare)))!.record)).not.toContain('ipn_kit_traceparent');
    } finally {
      register();
    }
    healthy = true;
    await eventually('delivered', async () => (await store.get(keyOf(bare)))?.status === 'delivered');
    // The entry is delivered before its attempt's span ends and reaches the exporter: waited for, as above.
    await eventually('the delivered attempt span', () =>
      spans('ipn.deliver', String(bare.transaction_id)).some(
        (span) => span.attributes['ipn.outcome'] === 'delivered',
      ),
    );
    const retries = spans('ipn.deliver', String(bare.transaction_id));
    expect(retries.length).toBeGreaterThan(0);
    for (const retry of retries) expect(retry.links).toEqual([]);
    for (const notification of heard) expect(notification).not.toContain('traceparent');
  });

  test('with no tracer provider registered, no span is made and the inbox keeps the record as received', async () => {
    unregister();
    try {
      const store = await fresh();
      const payload = uniquePayload();
      const { ipn, post } = await start(store);
      ipn.on('successful', () => {});
      expect((await post(payload)).status).toBe(200);
      await eventually('delivered', async () => (await store.get(keyOf(payload)))?.status === 'delivered');
      expect(exporter.getFinishedSpans()).toEqual([]);
      expect(Object.keys((await store.get(keyOf(payload)))!.record)).not.toContain('ipn_kit_traceparent');
    } finally {
      register();
    }
  });
}

describeWithService('PostgreSQL', 'PostgresStore', () => {
  const pool = new Pool({ connectionString: databaseUrl(), max: 4, idleTimeoutMillis: 500 });
  pool.on('error', () => {});
  const tables: string[] = [];
  afterAll(async () => {
    await dropPostgresInboxes(pool, tables);
    await pool.end();
  }, CLEANUP_TIMEOUT_MS);
  const tableOf = new WeakMap<DurableStore, string>();
  scenarios(
    async () => {
      const table = `ipn_traces_${process.pid}_${tables.length}`;
      tables.push(table, `${table}_states`);
      const store = new PostgresStore({ pool, table });
      await store.migrate();
      tableOf.set(store, table);
      return store;
    },
    (store) => new PostgresStore({ pool, table: tableOf.get(store)! }),
  );
});

describeWithService('Redis', 'RedisStore', () => {
  const client = new Redis(redisUrl(), { lazyConnect: true });
  const prefixes: string[] = [];
  afterAll(async () => {
    for (const prefix of prefixes) {
      const keys = await client.keys(`${prefix}*`);
      if (keys.length > 0) await client.del(...keys);
    }
    client.disconnect();
  });
  const prefixOf = new WeakMap<DurableStore, string>();
  scenarios(
    () => {
      const prefix = `ipn-kit-test:traces:${process.pid}:${prefixes.length}:`;
      prefixes.push(prefix);
      const store = new RedisStore({ client, prefix });
      prefixOf.set(store, prefix);
      return store;
    },
    (store) => new RedisStore({ client, prefix: prefixOf.get(store)! }),
  );
});

describeWithService('MariaDB', 'MysqlStore', () => {
  const pool = createPool({ uri: mysqlUrl(), connectionLimit: 4 });
  const tables: string[] = [];
  afterAll(async () => {
    await dropMysqlInboxes(pool, tables);
    await pool.end();
  }, CLEANUP_TIMEOUT_MS);
  const tableOf = new WeakMap<DurableStore, string>();
  scenarios(
    async () => {
      const table = `ipn_traces_${process.pid}_${tables.length}`;
      tables.push(table, `${table}_states`, `${table}_audit`, `${table}_expected`);
      const store = new MysqlStore({ pool, table });
      await store.migrate();
      tableOf.set(store, table);
      return store;
    },
    (store) => new MysqlStore({ pool, table: tableOf.get(store)! }),
  );
});

describe('SqliteStore', () => {
  const folder = mkdtempSync(join(tmpdir(), 'ipn-sqlite-traces-'));
  const opened: Database.Database[] = [];
  afterAll(() => {
    for (const database of opened) database.close();
    rmSync(folder, { recursive: true, force: true });
  });
  const open = (file: string) => {
    const database = new Database(file);
    opened.push(database);
    return database;
  };
  const fileOf = new WeakMap<DurableStore, string>();
  scenarios(
    async () => {
      const file = join(folder, `${opened.length}.db`);
      const store = new SqliteStore({ database: open(file) });
      await store.migrate();
      fileOf.set(store, file);
      return store;
    },
    // The next process opens the same file.
    (store) => new SqliteStore({ database: open(fileOf.get(store)!) }),
  );
});

describe('MemoryStore', () => {
  // A restart loses a MemoryStore: the "next process" is a second router over the same store object.
  scenarios(
    () => new MemoryStore(),
    (store) => store,
  );
});

describe('at most once (MemoryStore, the default delivery)', () => {
  const opened: Array<{ close(): Promise<void> }> = [];
  afterEach(async () => {
    for (const one of opened.splice(0).reverse()) await one.close();
  });
  async function start(options: Partial<Options> = {}) {
    const ipn = ipnRouter({ store: new MemoryStore(), logger: quiet, ...options });
    const served = await serve(ipn);
    opened.push({ close: () => ipn.close() }, served);
    return { ipn, ...served };
  }

  test('the one attempt is a child of the request; a resend and a bad body are told by the request span', async () => {
    const { ipn, post } = await start();
    ipn.on('successful', () => void appTracer().startSpan('credit the order').end());
    const payload = uniquePayload();
    const id = String(payload.transaction_id);
    expect((await post(payload)).status).toBe(200);
    expect((await post(payload)).status).toBe(200);
    expect((await post({ ...payload, transaction_id: '' })).status).toBe(400);
    await eventually('the attempt span', () => spans('ipn.deliver', id).length === 1);

    const requests = spans('ipn.request', id);
    expect(requests.map((span) => span.attributes['ipn.outcome'])).toEqual(['accepted', 'duplicate']);
    const [attempt] = spans('ipn.deliver', id);
    expect(parentOf(attempt!)).toBe(requests[0]!.spanContext().spanId);
    expect(attempt!.attributes).toMatchObject({ 'ipn.attempt': 1, 'ipn.outcome': 'emitted' });
    const credit = exporter.getFinishedSpans().find((span) => span.name === 'credit the order')!;
    expect(parentOf(credit)).toBe(attempt!.spanContext().spanId);
    const refused = exporter
      .getFinishedSpans()
      .find((span) => span.name === 'ipn.request' && span.attributes['ipn.outcome'] === 'invalid_fields');
    expect(refused?.attributes).toMatchObject({ 'http.response.status_code': 400 });
    expect(refused?.attributes['ipn.transaction_id']).toBeUndefined(); // not known: the body was not valid
  });

  test('with verify, the attempt holds the status query and says it delivered', async () => {
    const payload = uniquePayload();
    const id = String(payload.transaction_id);
    const record = ipnNotificationSchema.parse(payload);
    const { ipn, post } = await start({ verify: { getStatus: () => Promise.resolve(record) } });
    ipn.on('successful', () => {});
    expect((await post(payload)).status).toBe(200);
    await eventually('the attempt span', () => spans('ipn.deliver', id).length === 1);
    const [request] = spans('ipn.request', id);
    const [attempt] = spans('ipn.deliver', id);
    const [query] = spans('ipn.status_query', id);
    expect(parentOf(attempt!)).toBe(request!.spanContext().spanId);
    expect(attempt!.attributes).toMatchObject({ 'ipn.outcome': 'delivered' });
    expect(parentOf(query!)).toBe(attempt!.spanContext().spanId);
  });
});
