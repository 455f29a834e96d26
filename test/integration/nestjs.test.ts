import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { Pool } from 'pg';
import { createFakeProvider, type FakeProvider } from '../../lib/testing.js';
import { uniquePayload } from '../helpers/payloads.js';
import { databaseUrl, describeWithService, eventually } from '../helpers/services.js';
import { until } from '../helpers/until.js';

/** Ends `child` (SIGTERM, then SIGKILL after 10 s) and resolves once it has exited. */
async function stopped(child: ChildProcess | undefined): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill();
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}

/** Ends `pool` and resolves once every one of its connections has closed, not only once it has let them go. */
async function closed(pool: Pool): Promise<void> {
  let open = pool.totalCount;
  const gone = new Promise<void>((resolve) => {
    if (open === 0) resolve();
    pool.on('remove', () => {
      if (--open === 0) resolve();
    });
  });
  await pool.end();
  await gone;
}

/**
 * The NestJS example (examples/nestjs: IpnModule, Nest's body parser off, JSON for the controllers) on real
 * NestJS 12 and its Express platform. NestJS 12 is ESM-only and jest loads CommonJS, so the app runs in a
 * process of its own (test/processes/nest-app.ts, through tsx), printing each event as a line of JSON.
 */

const root = join(__dirname, '../..');
// Each test waits on the app's output (never on a timer); a loaded CI machine may take its time.
jest.setTimeout(60_000);

interface Line {
  event: string;
  transaction_id?: string;
  custom_data?: string;
  reason?: string;
  status?: number;
}

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}

describe('the NestJS example on NestJS 12, through a real server', () => {
  let provider: FakeProvider;
  let child: ChildProcess | undefined;
  let base: string;
  const output: string[] = [];
  const events = (): Line[] =>
    output.filter((line) => line.startsWith('{')).map((line) => JSON.parse(line) as Line);
  const count = (event: string, custom_data?: string) =>
    events().filter(
      (line) => line.event === event && (custom_data === undefined || line.custom_data === custom_data),
    ).length;

  beforeAll(async () => {
    provider = await createFakeProvider({ apiKey: 'nest-key', resendIntervalMs: 10 });
    const port = await freePort();
    base = `http://127.0.0.1:${port}`;
    child = spawn(join(root, 'node_modules/.bin/tsx'), ['test/processes/nest-app.ts'], {
      cwd: root,
      env: {
        ...process.env,
        PORT: String(port),
        PAYMENT_STATUS_URL: provider.statusBaseUrl,
        PAYMENT_API_KEY: 'nest-key',
      },
    });
    child.stdout?.on('data', (chunk: Buffer) => output.push(...chunk.toString().split('\n').filter(Boolean)));
    child.stderr?.on('data', (chunk: Buffer) => output.push(chunk.toString()));
    await until(
      () => {
        if (child?.exitCode !== null) throw new Error(`the Nest app exited:\n${output.join('\n')}`);
        return count('listening') === 1;
      },
      'the Nest app to listen',
      60_000,
    );
  }, 90_000);

  afterAll(async () => {
    await stopped(child);
    await provider?.close();
  });

  const post = (path: string, body: string, type = 'application/json') =>
    fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': type }, body });

  test('a payment notified then resent twice answers 200 each time and is credited once', async () => {
    const paid = provider.initiate({
      amount: 5000,
      ipnUrl: `${base}/ipn`,
      customData: 'nest-order-1',
      outcome: 'SUCCESSFUL',
      duplicates: 2,
    });
    const report = await paid.delivered;
    await until(
      () => count('duplicate') === 2 && count('successful') === 1,
      'the credit and both resends',
      20_000,
    );

    // A resend that comes while the first copy is still being verified (`verify`) is answered 503, and sent
    // again until it is answered 200, as a duplicate.
    expect(report.statuses.join()).toMatch(/^200(,(503,)*200){2}$/);
    expect(events().filter((line) => line.event === 'successful')).toEqual([
      expect.objectContaining({ transaction_id: paid.transactionId, custom_data: 'nest-order-1' }),
    ]);
    expect(provider.statusQueriesFor(paid.transactionId)).toBe(1);
  });

  test('a forged FAILED of a paid transaction is rejected, never failed nor a conflict', async () => {
    // A forged FAILED of a real, paid transaction: `verify` rejects it (the service says SUCCESSFUL), and
    // only a verified notification is decided by the lifecycle, so it is no conflict (issue 33).
    // (A made-up id is believed forged only once the service says "not found" twice, minIntervalMs apart.)
    const ipnUrl = `${base}/ipn`;
    const real = provider.initiate({ amount: 20, ipnUrl, customData: 'nest-order-3', outcome: 'SUCCESSFUL' });
    await real.delivered;
    await until(() => count('successful', 'nest-order-3') === 1, 'the real credit', 20_000);
    const forgery = { ipnUrl, transactionId: real.transactionId, state: 'FAILED', customData: 'nest-forged' };
    const status = await provider.forge(forgery);
    await until(() => count('rejected', 'nest-forged') === 1, 'the rejection', 20_000);

    expect(status).toBe(200);
    expect(count('failed', 'nest-forged')).toBe(0);
    expect(count('conflict', 'nest-forged')).toBe(0);
  });

  test("malformed JSON answers the router's 400 in JSON, not Nest's body parser's, and emits invalid", async () => {
    const response = await post('/ipn', '{"transaction_id":');
    await until(() => count('invalid') === 1, 'the invalid event', 20_000);

    expect(response.status).toBe(400);
    expect(await response.json()).toMatchObject({ error: 'malformed_body' });
    expect(events().find((line) => line.event === 'invalid')).toMatchObject({
      reason: 'malformed_body',
      status: 400,
    });
  });

  test('the controllers still get their JSON parsed', async () => {
    const response = await post('/orders', '{"id":"o-1"}');

    expect(response.status).toBe(201);
    expect(await response.json()).toEqual({ received: { id: 'o-1' } });
  });
});

describeWithService('PostgreSQL', 'the NestJS example on Prisma (examples/nestjs/prisma-app.ts)', () => {
  // A database of its own: the example's Prisma uses the public schema, as a partner's app would.
  const database = `ipn_nest_prisma_${process.pid}_${Date.now() % 100_000}`;
  const url = new URL(databaseUrl());
  url.pathname = `/${database}`;
  let admin: Pool;
  let pool: Pool;
  let child: ChildProcess | undefined;
  let base: string;
  const output: string[] = [];

  beforeAll(async () => {
    admin = new Pool({ connectionString: databaseUrl(), max: 1 });
    await admin.query(`CREATE DATABASE ${database}`);
    pool = new Pool({ connectionString: url.href, max: 2 });
    // The partner's own ledger (its migration); the app creates ipn-kit's inbox at start (store.migrate()).
    await pool.query(
      'CREATE TABLE ledger (id serial PRIMARY KEY, transaction_id text NOT NULL, order_id text NOT NULL, amount numeric NOT NULL)',
    );
    await pool.query(
      'CREATE TABLE orders (id text PRIMARY KEY, transaction_id text NOT NULL, amount numeric NOT NULL, paid_at timestamptz)',
    );
    const port = await freePort();
    base = `http://127.0.0.1:${port}`;
    child = spawn(join(root, 'node_modules/.bin/tsx'), ['test/processes/nest-prisma-app.ts'], {
      cwd: root,
      env: { ...process.env, PORT: String(port), DATABASE_URL: url.href },
    });
    child.stdout?.on('data', (chunk: Buffer) => output.push(chunk.toString()));
    child.stderr?.on('data', (chunk: Buffer) => output.push(chunk.toString()));
    await until(
      () => {
        if (child?.exitCode !== null) throw new Error(`the Nest app exited:\n${output.join('')}`);
        return output.join('').includes('{"event":"listening"}');
      },
      'the Nest app on Prisma to listen',
      60_000,
    );
  }, 90_000);

  afterAll(async () => {
    await stopped(child); // SIGTERM, which tsx passes on to the app's process
    // pg's pool.end() resolves before its connections have closed; DROP DATABASE ... WITH (FORCE) ends one
    // still closing with 57P01, which the pool emits as an 'error' nobody listens to: the file crashed in CI.
    if (pool) await closed(pool);
    await admin?.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
    await admin?.end();
  }, 30_000);

  const post = (payload: Record<string, unknown>) =>
    fetch(`${base}/ipn`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(payload),
    });

  test('each notification, posted twice, credits the ledger once, through PrismaService in the delivery transaction', async () => {
    const payloads = [
      uniquePayload({ custom_data: 'nest-prisma-1' }),
      uniquePayload({ custom_data: 'nest-prisma-2' }),
    ];
    for (const payload of payloads) {
      await pool.query('INSERT INTO orders (id, transaction_id, amount) VALUES ($1, $2, $3)', [
        payload.custom_data,
        payload.transaction_id,
        payload.amount,
      ]);
      expect((await post(payload)).status).toBe(200);
      expect((await post(payload)).status).toBe(200);
    }
    const ids = payloads.map((payload) => String(payload.transaction_id));
    await eventually('both delivered', async () => {
      const { rows } = await pool.query(
        "SELECT count(*)::int AS n FROM ipn_inbox WHERE transaction_id = ANY($1) AND status = 'delivered'",
        [ids],
      );
      return (rows[0] as { n: number }).n === 2;
    });

    const { rows } = await pool.query(
      'SELECT transaction_id, order_id FROM ledger WHERE transaction_id = ANY($1) ORDER BY order_id',
      [ids],
    );
    expect(rows).toEqual([
      { transaction_id: ids[0], order_id: 'nest-prisma-1' },
      { transaction_id: ids[1], order_id: 'nest-prisma-2' },
    ]);
  });
});
