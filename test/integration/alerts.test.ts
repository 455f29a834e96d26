import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import { Pool } from 'pg';
import { alertWebhook, ipnRouter, type AlertEvent, type DurableStore, type Options } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { RedisStore } from 'ipn-kit/redis';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { servedRouters } from '../helpers/servers.js';
import { databaseUrl, describeWithService, eventually, redisUrl } from '../helpers/services.js';
import { until } from '../helpers/until.js';
import { webhookReceiver } from '../helpers/webhook-receiver.js';

const serve = servedRouters();
const keyOf = (payload: Record<string, unknown>) =>
  `${String(payload.transaction_id)}:${String(payload.state)}`;
const brief = (events: AlertEvent[]) => events.map((e) => `${e.kind} ${e.state}`);

/** An at-least-once router over `store` whose `successful` listener fails while `ledger.down`. */
async function start(store: DurableStore, options: Partial<Options> = {}) {
  const ipn = ipnRouter({
    store,
    delivery: 'at-least-once',
    logger: quiet,
    retryDelayMs: 1,
    recoveryIntervalMs: 20,
    maxAttempts: 30,
    ...options,
  });
  const ledger = { down: true, calls: 0, credited: [] as string[] };
  ipn.on('successful', (n) => {
    ledger.calls += 1;
    if (ledger.down) throw new Error('the ledger database is down');
    ledger.credited.push(n.transaction_id);
  });
  const alerts: AlertEvent[] = [];
  ipn.on('alert', (event) => void alerts.push(event));
  const { post } = await serve(ipn);
  return { ipn, ledger, alerts, post };
}

/** The scenarios, on each durable store. */
function scenarios(fresh: () => Promise<DurableStore>) {
  test('a listener failing ten attempts in a row fires deliveries_failing once; its next success resolves it', async () => {
    const store = await fresh();
    const slack = await webhookReceiver();
    try {
      const { ipn, ledger, alerts, post } = await start(store);
      const notifier = alertWebhook({ url: slack.url, logger: quiet });
      ipn.on('alert', notifier);
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);

      await until(() => alerts.length > 0, 'the firing alert', 10_000);
      expect(alerts).toHaveLength(1);
      expect(alerts[0]).toMatchObject({
        kind: 'deliveries_failing',
        state: 'firing',
        count: 10,
        threshold: 10,
        key: keyOf(payload),
        message: '10 delivery attempts failed in a row',
      });
      expect(alerts[0]?.lastError).toMatch(/the ledger database is down/);
      expect(ledger.calls).toBe(10); // at the tenth failed attempt, not later
      expect((await store.get(keyOf(payload)))?.status).toBe('failed');

      ledger.down = false;
      await until(() => alerts.length > 1, 'the resolved alert', 10_000);
      expect(brief(alerts)).toEqual(['deliveries_failing firing', 'deliveries_failing resolved']);
      expect(alerts[1]?.since).toEqual(alerts[0]?.since);
      expect(ledger.credited).toEqual([payload.transaction_id]);
      expect((await store.get(keyOf(payload)))?.status).toBe('delivered');

      // The stand-in for Slack got both, as { text }.
      await notifier.idle();
      expect(slack.received).toEqual([
        {
          text: expect.stringMatching(
            /^\[ipn-kit\] FIRING deliveries_failing: 10 delivery attempts failed in a row \(since /,
          ),
        },
        { text: expect.stringMatching(/^\[ipn-kit\] RESOLVED deliveries_failing: deliveries succeed again/) },
      ]);
    } finally {
      await slack.close();
    }
  }, 30_000);

  test('a dead entry fires dead at once; a replay delivered resolves it at the next inbox read', async () => {
    const store = await fresh();
    const { ipn, ledger, alerts, post } = await start(store, { maxAttempts: 3 });
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await until(() => alerts.some((a) => a.kind === 'dead'), 'the dead alert', 10_000);
    expect(alerts.find((a) => a.kind === 'dead')).toMatchObject({
      state: 'firing',
      key: keyOf(payload),
      count: 1,
      message: `${keyOf(payload)} is dead after 3 attempts`,
    });
    expect(ledger.calls).toBe(3);
    expect((await store.get(keyOf(payload)))?.status).toBe('dead');

    ledger.down = false;
    expect(await ipn.inbox.replay(keyOf(payload))).toBe(true);
    await until(
      () => alerts.some((a) => a.kind === 'dead' && a.state === 'resolved'),
      'the dead alert resolved',
      10_000,
    );
    // Resolved once the inbox holds no dead entry: the replayed one is due again, then delivered.
    await until(() => ledger.credited.length === 1, 'the replay delivered', 10_000);
    await eventually(
      'the delivered mark',
      async () => (await store.get(keyOf(payload)))?.status === 'delivered',
    );
    expect(brief(alerts)).toEqual(['dead firing', 'dead resolved']);
  }, 30_000);

  test('an entry left failed past backlogAgeMs fires backlog; once delivered, the next read resolves it', async () => {
    const store = await fresh();
    // Its retry is an hour away: the entry stays failed, older at every recovery pass.
    const { ipn, ledger, alerts, post } = await start(store, {
      retryDelayMs: 3_600_000,
      alerts: { backlogAgeMs: 50 },
    });
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await until(() => alerts.length > 0, 'the backlog alert', 10_000);
    expect(alerts[0]).toMatchObject({ kind: 'backlog', state: 'firing', threshold: 50, key: keyOf(payload) });
    expect(alerts[0]?.value).toBeGreaterThan(50);
    expect(ipn.metrics().backlogAgeMs).toBeGreaterThan(50);
    expect((await store.get(keyOf(payload)))?.status).toBe('failed');

    ledger.down = false;
    expect(await ipn.inbox.replay(keyOf(payload))).toBe(true);
    await until(() => alerts.length > 1, 'the backlog alert resolved', 10_000);
    expect(brief(alerts)).toEqual(['backlog firing', 'backlog resolved']);
    expect((await store.get(keyOf(payload)))?.status).toBe('delivered');
    expect(ipn.metrics().backlogAgeMs).toBe(0);
  }, 30_000);

  test('with no alert listener, the recovery passes never read the inbox for alerts', async () => {
    const store = await fresh();
    let reads = 0;
    const list = store.list.bind(store);
    store.list = (options) => {
      reads += 1;
      return list(options);
    };
    const ipn = ipnRouter({
      store,
      delivery: 'at-least-once',
      logger: quiet,
      retryDelayMs: 1,
      recoveryIntervalMs: 20,
    });
    let delivered = 0;
    ipn.on('successful', () => void (delivered += 1));
    const { post } = await serve(ipn);
    expect((await post(uniquePayload())).status).toBe(200);
    await until(() => delivered === 1, 'the delivery');
    const passes = await ipn.drain(); // a pass of its own too
    expect(passes.left).toBe(0);
    expect(reads).toBe(0);
    expect(ipn.metrics().backlogAgeMs).toBeUndefined();
  });
}

describeWithService('PostgreSQL', 'alerts on PostgresStore (at least once)', () => {
  let pool: Pool;
  const tables: string[] = [];
  beforeAll(() => {
    pool = new Pool({ connectionString: databaseUrl(), max: 4 });
    pool.on('error', () => {});
  });
  afterAll(async () => {
    for (const table of tables) await pool.query(`DROP TABLE IF EXISTS "${table}", "${table}_expected"`);
    await pool.end();
  });
  scenarios(async () => {
    const table = `ipn_test_alerts_${process.pid}_${randomUUID().slice(0, 8)}`;
    tables.push(table);
    const store = new PostgresStore({ pool, table });
    await store.migrate();
    return store;
  });
});

describeWithService('Redis', 'alerts on RedisStore (at least once)', () => {
  let client: Redis;
  const prefixes: string[] = [];
  beforeAll(() => {
    client = new Redis(redisUrl());
    client.on('error', () => {});
  });
  afterAll(async () => {
    for (const prefix of prefixes) {
      const keys = await client.keys(`${prefix}*`);
      if (keys.length > 0) await client.del(...keys);
    }
    client.disconnect();
  });
  scenarios(() => {
    const prefix = `ipn-kit-test:alerts:${process.pid}:${randomUUID().slice(0, 8)}:`;
    prefixes.push(prefix);
    return Promise.resolve(new RedisStore({ client, prefix }));
  });
});
