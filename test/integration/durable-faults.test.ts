import { fork } from 'node:child_process';
import { join } from 'node:path';
import { Pool } from 'pg';
import { ipnNotificationSchema, ipnRouter, type IpnRouter, type Options } from '../../lib/index.js';
import { PostgresStore, type PgQueryable } from '../../lib/postgres.js';
import { FaultyPool, type Fault } from '../helpers/faulty-pool.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, type Running } from '../helpers/servers.js';
import { databaseUrl, describeWithService, eventually } from '../helpers/services.js';
import { CLEANUP_TIMEOUT_MS, dropPostgresInboxes } from '../helpers/drop-inboxes.js';

/**
 * The rule of the durable inbox: a notification answered 200 is always somewhere, delivered, in the inbox or
 * reported. Checked by failing each write statement of the durable path in turn, through a pool wrapper
 * (refused, or committed with its answer lost), and by killing the process right after each one; then the
 * service resends what was not answered 200, and every notification answered 200 must end delivered, with
 * the service's own record, and credited (once, but where the fault fell between the listener and its
 * `delivered` mark, which at-least-once delivery repeats by design).
 */

jest.setTimeout(120_000);

const suffix = `${process.pid}_${Date.now() % 100_000}`;
let tables = 0;
const servers: Running[] = [];
const routers: IpnRouter[] = [];

afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => server.close()));
  await Promise.all(routers.splice(0).map((router) => router.close()));
});

const keyOf = (payload: Record<string, unknown>) =>
  `${String(payload.transaction_id)}:${String(payload.state)}`;

/** The service: posts a notification, and tells whether it was answered 200 (a reset connection is not). */
async function post(url: string, body: unknown): Promise<number> {
  try {
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(10_000),
    });
    await response.arrayBuffer();
    return response.status;
  } catch {
    return 0;
  }
}

describeWithService('PostgreSQL', 'the durable path under faults at every write', () => {
  const pool = new Pool({ connectionString: databaseUrl(), max: 6 });
  pool.on('error', () => {});
  const created: string[] = [];

  afterAll(async () => {
    await dropPostgresInboxes(pool, created);
    await pool.end();
  }, CLEANUP_TIMEOUT_MS);

  /** A fresh inbox table and credits table (no unique constraint: every delivery counts). */
  async function tablesFor(): Promise<{ table: string; credits: string }> {
    tables += 1;
    const table = `ipn_faults_${suffix}_${tables}`;
    const credits = `credits_faults_${suffix}_${tables}`;
    created.push(table, credits);
    await new PostgresStore({ pool, table }).migrate();
    await pool.query(`CREATE TABLE ${credits} (transaction_id text NOT NULL, order_id text NOT NULL)`);
    return { table, credits };
  }

  /** A router (the app after its restart, or the one under test) on `queryable`. */
  async function app(
    queryable: PgQueryable,
    table: string,
    credits: string,
    options: Partial<Options>,
    failures = 0,
  ) {
    const ipn = ipnRouter({
      store: new PostgresStore({ pool: queryable, table }),
      delivery: 'at-least-once',
      logger: quiet,
      leaseMs: 1_500, // an attempt may take 1.35 s on a busy machine before it counts as failed
      retryDelayMs: 5,
      recoveryIntervalMs: 50,
      ...options,
    });
    routers.push(ipn);
    const recorder = recordEvents(ipn);
    let calls = 0;
    ipn.on('successful', async (n) => {
      calls += 1;
      if (calls <= failures) throw new Error('ledger down');
      await pool.query(`INSERT INTO ${credits} (transaction_id, order_id) VALUES ($1, $2)`, [
        n.transaction_id,
        n.custom_data,
      ]);
    });
    const running = await listen(ipn);
    servers.push(running);
    return { ipn, recorder, url: running.url };
  }

  /**
   * The service's resends until a 200, then the rule: the genuine notification ends delivered with its own
   * record, credited once (twice at most when the fault fell after its listener ran), the forgery never.
   */
  async function expectDelivered(
    url: string,
    table: string,
    credits: string,
    genuine: Record<string, unknown>,
    unanswered: Array<Record<string, unknown>>,
    duplicateAllowed: boolean,
  ): Promise<void> {
    for (const body of unanswered)
      await eventually('a resend answered 200', async () => (await post(url, body)) === 200);
    await eventually('the genuine notification delivered', async () => {
      const { rows } = await pool.query(`SELECT status FROM ${table} WHERE key = $1`, [keyOf(genuine)]);
      return rows[0]?.status === 'delivered';
    });
    const { rows: stored } = await pool.query(`SELECT record FROM ${table} WHERE key = $1`, [keyOf(genuine)]);
    expect(stored[0].record).toMatchObject({ custom_data: genuine.custom_data, amount: genuine.amount });
    const { rows } = await pool.query(`SELECT order_id FROM ${credits}`);
    const orders = rows.map((row: { order_id: string }) => row.order_id);
    expect(orders.every((order) => order === genuine.custom_data)).toBe(true);
    if (duplicateAllowed) expect([1, 2]).toContain(orders.length);
    else expect(orders).toHaveLength(1);
  }

  // The forged-copy-first sequence: the forgery's receive, the genuine copy's receive (a duplicate), the
  // replacement by the service's record, its `delivered` mark. A listener failing once: the receive, the
  // `failed` mark, the retry's lease, the `delivered` mark.
  const WRITES = [1, 2, 3, 4];

  describe.each<Fault>(['refused', 'lost'])('a write %s', (fault) => {
    test.each(WRITES)(
      'forged copy first, fault at write %i: the genuine payment is delivered',
      async (at) => {
        const { table, credits } = await tablesFor();
        const genuine = uniquePayload({ custom_data: `order-${at}`, amount: 5_000 });
        const forged = { ...genuine, custom_data: 'forger-order', amount: 1 };
        let open = () => {};
        const gate = new Promise<void>((resolve) => (open = resolve));
        const record = ipnNotificationSchema.parse(genuine);
        const faulty = new FaultyPool(pool, fault, at);
        const { url } = await app(faulty, table, credits, {
          verify: { getStatus: async () => (await gate, record) },
        });

        const unanswered = [];
        for (const body of [forged, genuine]) if ((await post(url, body)) !== 200) unanswered.push(body);
        open();
        await eventually('the fault', () => faulty.fired);
        // The settle of the genuine record is the 4th write: a lost answer there is a duplicate delivery.
        await expectDelivered(url, table, credits, genuine, unanswered, at === 4);
      },
    );

    test.each(WRITES)('a listener failing once, fault at write %i: delivered', async (at) => {
      const { table, credits } = await tablesFor();
      const genuine = uniquePayload({ custom_data: `order-${at}` });
      const faulty = new FaultyPool(pool, fault, at);
      const { url } = await app(faulty, table, credits, {}, 1);

      const unanswered = (await post(url, genuine)) === 200 ? [] : [genuine];
      await eventually('the fault', () => faulty.fired);
      // The `delivered` mark is the 4th write; the 2nd is the `failed` mark, after a failed attempt only.
      await expectDelivered(url, table, credits, genuine, unanswered, at === 4);
    });
  });

  describe('the process killed right after a write', () => {
    const SCRIPT = join(__dirname, '..', 'processes', 'durable-crash-app.ts');

    /** Runs the doomed app: posts the copies, opens its status source, and waits until it has died. */
    async function doomed(
      table: string,
      credits: string,
      at: number,
      genuine: Record<string, unknown>,
      copies: Array<Record<string, unknown>>,
    ): Promise<Array<Record<string, unknown>>> {
      const child = fork(SCRIPT, [], {
        execArgv: ['--import', 'tsx'],
        env: {
          ...process.env,
          DATABASE_URL: databaseUrl(),
          TABLE: table,
          CREDITS: credits,
          CRASH_AT: String(at),
          GENUINE: JSON.stringify(genuine),
        },
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      });
      const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      const url = await new Promise<string>((resolve, reject) => {
        child.once('exit', (code) => reject(new Error(`the app exited (${code}) before it listened`)));
        child.on('message', (message: { type: string; url?: string }) => {
          if (message.type === 'ready' && message.url) resolve(message.url);
        });
      });
      const unanswered = [];
      for (const body of copies) if ((await post(url, body)) !== 200) unanswered.push(body);
      child.on('error', () => {}); // it may die before 'open' reaches it
      if (child.connected) child.send('open', () => {});
      await exited;
      return unanswered;
    }

    test.each(WRITES)(
      'forged copy first, killed after write %i: after the restart the genuine payment is delivered',
      async (at) => {
        const { table, credits } = await tablesFor();
        const genuine = uniquePayload({ custom_data: `order-crash-${at}`, amount: 5_000 });
        const forged = { ...genuine, custom_data: 'forger-order', amount: 1 };
        const unanswered = await doomed(table, credits, at, genuine, [forged, genuine]);

        const record = ipnNotificationSchema.parse(genuine);
        const { url } = await app(pool, table, credits, {
          verify: { getStatus: () => Promise.resolve(record) },
        });
        await expectDelivered(url, table, credits, genuine, unanswered, false);
      },
    );

    test.each([1, 2])('one notification, killed after write %i: delivered after the restart', async (at) => {
      const { table, credits } = await tablesFor();
      const genuine = uniquePayload({ custom_data: `order-single-${at}` });
      const unanswered = await doomed(table, credits, at, genuine, [genuine]);

      const record = ipnNotificationSchema.parse(genuine);
      const { url } = await app(pool, table, credits, {
        verify: { getStatus: () => Promise.resolve(record) },
      });
      await expectDelivered(url, table, credits, genuine, unanswered, false);
    });
  });
});
