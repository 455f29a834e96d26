import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { createFakeProvider, type FakeProvider } from '../../lib/testing.js';
import { buildNextApp, isBuilt, NEXT_BIN, nextAppDir } from '../helpers/next-app.js';
import { ledgerSchema } from '../helpers/ledger-schema.js';
import { insertOrder, NOT_THE_PAYMENT, ORDERS } from '../helpers/refused-payments.js';
import { databaseUrl, describeWithService, eventually, unreachable } from '../helpers/services.js';
import { until } from '../helpers/until.js';

/**
 * A real Next.js application (examples/nextjs: an App Router route handler and a Pages Router API route),
 * production-built with `next build` and served by `next start`, receiving notifications from the fake
 * payment service. The build is cached in the OS temp dir under a hash of its sources (test/helpers/
 * next-app.ts): the first run builds (a minute or two on 2 cores), later runs with nothing changed do not.
 */

const root = join(__dirname, '../..');
const BUILD_TIMEOUT = 10 * 60_000;
// Each test waits on the app's output (never on a timer); a loaded CI machine may take its time.
jest.setTimeout(60_000);

/** Why Next.js cannot build here, or undefined when it can: the package and its native compiler. */
function missing(): string | undefined {
  if (!existsSync(join(root, 'node_modules/next/package.json'))) return 'next is not installed';
  const swc = existsSync(join(root, 'node_modules/@next'))
    ? readdirSync(join(root, 'node_modules/@next')).filter((name) => name.startsWith('swc-'))
    : [];
  if (swc.length === 0) return "no @next/swc-* binary for this platform (npm ci skipped Next's compiler)";
  return undefined;
}

const reason = missing();
if (reason !== undefined && process.env.CI === 'true')
  throw new Error(`the Next.js suite cannot run: ${reason}`);
if (reason !== undefined) console.warn(`skipping the Next.js suite: ${reason}`);
const describeNext = reason === undefined ? describe : describe.skip;

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}

describeNext('a Next.js app (production build, next start) receiving notifications', () => {
  let provider: FakeProvider;
  let server: ChildProcess | undefined;
  let base: string;
  const output: string[] = [];
  const lines = (prefix: string) => output.filter((line) => line.startsWith(prefix));
  /**
   * The schema of the Drizzle and Prisma routes' ledger and inbox, when PostgreSQL answers: made before the
   * app starts, with a ledger Prisma can write (an `id`) and no inbox, which the app's instrumentation.ts
   * must create with store.migrate() at start (a notification would get 503 without it).
   */
  const ledger =
    unreachable('PostgreSQL') === null
      ? ledgerSchema('ipn_next', [
          'DROP TABLE ipn_inbox',
          'DROP TABLE ipn_inbox_expected',
          'ALTER TABLE ledger ADD COLUMN id serial PRIMARY KEY',
          ORDERS,
        ])
      : undefined;

  beforeAll(async () => {
    provider = await createFakeProvider({ apiKey: 'next-key', resendIntervalMs: 10 });
    const dir = nextAppDir();
    if (!isBuilt(dir)) buildNextApp(dir);
    const port = await freePort();
    base = `http://127.0.0.1:${port}`;
    server = spawn(process.execPath, [NEXT_BIN, 'start', '-p', String(port), '-H', '127.0.0.1'], {
      cwd: dir,
      env: {
        ...process.env,
        NEXT_TELEMETRY_DISABLED: '1',
        NODE_ENV: 'production',
        PAYMENT_STATUS_URL: provider.statusBaseUrl,
        PAYMENT_API_KEY: 'next-key',
        // The Drizzle route's pool: the test database, on the schema of this run.
        DATABASE_URL: databaseUrl(),
        ...(ledger ? { PGOPTIONS: `-c search_path=${ledger.schema}`, DATABASE_SCHEMA: ledger.schema } : {}),
      },
    });
    const collect = (chunk: Buffer) => output.push(...chunk.toString().split('\n').filter(Boolean));
    server.stdout?.on('data', collect);
    server.stderr?.on('data', collect);
    await until(
      () => {
        if (server?.exitCode !== null) throw new Error(`next start exited:\n${output.join('\n')}`);
        return output.some((line) => /Ready in|ready/i.test(line));
      },
      'next start to be ready',
      60_000,
    );
  }, BUILD_TIMEOUT);

  afterAll(async () => {
    server?.kill();
    await provider?.close();
  });

  const post = (path: string, body: string, type = 'application/json') =>
    fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': type }, body });

  let initiated = 0;
  const nextTransactionId = () => {
    initiated += 1;
    return `NXT.${process.pid}${String(initiated).padStart(4, '0')}`;
  };
  /**
   * The database routes credit only the order a payment was initiated for: the order `id`, recorded with
   * the transaction_id the service gives (chosen here) and `amount` (`paid` already, or not), is returned
   * with that transaction_id, ready for provider.initiate().
   */
  const newOrder = async (id: string, amount: number, paid = false) => {
    const transactionId = nextTransactionId();
    await insertOrder(ledger!.pool(), { id, transactionId, amount, paid });
    return transactionId;
  };
  /**
   * A payment of `amount` to `path` for an order of another amount, an unknown order and an order already
   * paid: each is answered 200 and fails in the listener (retried, then dead), and none is credited.
   */
  const expectNothingCredited = async (path: string, prefix: string) => {
    const cases = [
      { why: 'another amount', order: { amount: 9_999, paid: false } },
      { why: 'an unknown order', order: undefined },
      { why: 'an order already paid', order: { amount: 80, paid: true } },
    ];
    for (const [index, { why, order }] of cases.entries()) {
      const customData = `${prefix}-refused-${index}`;
      const transactionId = order
        ? await newOrder(customData, order.amount, order.paid)
        : nextTransactionId();
      const payment = provider.initiate({
        amount: 80,
        ipnUrl: `${base}${path}`,
        customData,
        outcome: 'SUCCESSFUL',
        transactionId,
      });
      expect((await payment.delivered).statuses).toEqual([200]);
      const key = `${transactionId}:SUCCESSFUL`;
      await eventually(`${why}: a failed attempt`, async () =>
        Boolean((await ledger!.entryOf(key))?.last_error),
      );
      expect({ why, error: (await ledger!.entryOf(key))?.last_error }).toEqual({
        why,
        error: expect.stringMatching(NOT_THE_PAYMENT),
      });
      expect({ why, ledger: await ledger!.ledgerOf(transactionId) }).toEqual({ why, ledger: [] });
    }
  };

  test('App Router: a payment notified then resent twice answers 200 each time and is credited once', async () => {
    const ipnUrl = `${base}/api/ipn`;
    const paid = provider.initiate({
      amount: 5000,
      ipnUrl,
      customData: 'order-next-1',
      outcome: 'SUCCESSFUL',
      duplicates: 2,
    });
    const report = await paid.delivered;
    await until(() => lines('credit order-next-1').length === 1, 'the credit line', 20_000);
    // A later notification's line proves the resends' turn is over: a second credit would have come first.
    await provider.initiate({ amount: 10, ipnUrl, customData: 'order-next-2', outcome: 'FAILED' }).delivered;
    await until(() => lines('failed order-next-2').length === 1, 'the failed line', 20_000);

    // A resend that came while the first copy was still being verified was answered 503, then sent again
    // until answered 200.
    expect(report.statuses.join()).toMatch(/^200(,(503,)*200){2}$/);
    expect(lines('credit order-next-1')).toEqual([`credit order-next-1: 5000 (${paid.transactionId})`]);
    expect(provider.statusQueriesFor(paid.transactionId)).toBe(1);
  });

  test('App Router: a forged FAILED of a paid transaction is rejected, never failed nor a conflict', async () => {
    // A forged FAILED of a real, paid transaction: `verify` rejects it, and only a verified notification is
    // decided by the lifecycle, so it is no conflict (issue 33).
    // (A made-up id is believed forged only once the service says "not found" twice, minIntervalMs apart.)
    const ipnUrl = `${base}/api/ipn`;
    const real = provider.initiate({ amount: 20, ipnUrl, customData: 'order-next-3', outcome: 'SUCCESSFUL' });
    await real.delivered;
    await until(() => lines('credit order-next-3').length === 1, 'the real credit', 20_000);
    const forgery = {
      ipnUrl,
      transactionId: real.transactionId,
      state: 'FAILED',
      customData: 'order-forged',
    };
    const status = await provider.forge(forgery);
    await until(() => lines('rejected order-forged').length === 1, 'the rejection', 20_000);

    expect(status).toBe(200);
    expect(lines('rejected order-forged')).toEqual(['rejected order-forged: mismatch']);
    expect(lines('conflict order-forged')).toEqual([]);
    expect(lines('failed order-forged')).toEqual([]);
    expect(lines('credit order-forged')).toEqual([]);
  });

  test('App Router: a bad body answers 400 malformed_body in JSON and emits invalid', async () => {
    const response = await post('/api/ipn', '{"transaction_id":');
    await until(() => lines('invalid 400 malformed_body').length === 1, 'the invalid line', 20_000);

    expect(response.status).toBe(400);
    expect(response.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await response.json()).toMatchObject({ error: 'malformed_body' });
  });

  test('App Router: GET answers 200 {"ok":true}', async () => {
    const response = await fetch(`${base}/api/ipn`);

    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ ok: true });
  });

  test("App Router: Next routes by method: HEAD follows GET (no body), a method route.ts does not export gets Next's own 405", async () => {
    const head = await fetch(`${base}/api/ipn`, { method: 'HEAD' });
    const put = await fetch(`${base}/api/ipn`, { method: 'PUT', body: '{}' });
    const getWithoutExport = await fetch(`${base}/api/prisma-ipn`);

    expect(head.status).toBe(200);
    expect(await head.text()).toBe('');
    expect(put.status).toBe(405);
    expect(put.headers.get('content-type') ?? '').not.toMatch(/json/);
    expect(getWithoutExport.status).toBe(405);
  });

  test("Pages Router: GET answers 200 and PUT the router's own 405 in JSON (every method reaches the router)", async () => {
    const get = await fetch(`${base}/api/legacy-ipn`);
    const put = await fetch(`${base}/api/legacy-ipn`, { method: 'PUT', body: '{}' });

    expect(get.status).toBe(200);
    expect(await get.json()).toEqual({ ok: true });
    expect(put.status).toBe(405);
    expect(put.headers.get('allow')).toBe('GET, HEAD, POST');
    expect(await put.json()).toMatchObject({ error: 'method_not_allowed' });
  });

  test('Pages Router: a payment and its resend answer 200 then duplicate; a bad body 400', async () => {
    const ipnUrl = `${base}/api/legacy-ipn`;
    const paid = provider.initiate({
      amount: 700,
      ipnUrl,
      customData: 'order-pages-1',
      outcome: 'SUCCESSFUL',
      duplicates: 1,
    });
    const report = await paid.delivered;
    await until(() => lines('credit order-pages-1').length === 1, 'the credit line', 20_000);
    const bad = await post('/api/legacy-ipn', '[1]');

    // The resend: a duplicate (200), after 503s when it came while the first copy was still being verified
    // (the service sends it again until it is answered 200).
    expect(report.statuses.join()).toMatch(/^200,(503,)*200$/);
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ error: 'not_an_object' });
    await until(() => lines('invalid 400 not_an_object').length === 1, 'the invalid line', 20_000);
    expect(lines('credit order-pages-1')).toHaveLength(1);
  });

  describeWithService('PostgreSQL', 'at least once, crediting through Drizzle', () => {
    test('a payment notified twice is credited once: one ledger row, written by tx.insert', async () => {
      const ipnUrl = `${base}/api/ledger-ipn`;
      const paid = provider.initiate({
        amount: 1200,
        ipnUrl,
        customData: 'order-drizzle-1',
        outcome: 'SUCCESSFUL',
        duplicates: 1,
        transactionId: await newOrder('order-drizzle-1', 1200),
      });
      const report = await paid.delivered;
      const key = `${paid.transactionId}:SUCCESSFUL`;
      await eventually(
        'the delivered mark',
        async () => (await ledger!.entryOf(key))?.status === 'delivered',
      );

      expect(report.statuses).toEqual([200, 200]);
      expect(await ledger!.ledgerOf(paid.transactionId)).toEqual([{ order_id: 'order-drizzle-1' }]);
      expect(lines('ledger order-drizzle-1')).toEqual([
        `ledger order-drizzle-1: 1200 (${paid.transactionId})`,
      ]);
    });

    test('a payment of another amount, of an unknown order or of an order already paid credits nothing', () =>
      expectNothingCredited('/api/ledger-ipn', 'order-drizzle'));
  });

  // docs/recipes.md, "Next.js App Router and Prisma 7": the singleton, instrumentation.ts, the route.
  describeWithService('PostgreSQL', 'the Next.js + Prisma 7 recipe: exactly once through Prisma', () => {
    const pending = (id: string) =>
      ledger!.pool().query(`SELECT count(*)::int AS n FROM ipn_inbox WHERE transaction_id = $1`, [id]);

    test('instrumentation.ts made the inbox; a payment notified twice is one ledger row, by tx.ledger.create', async () => {
      const ipnUrl = `${base}/api/prisma-ipn`;
      const paid = provider.initiate({
        amount: 3400,
        ipnUrl,
        customData: 'order-prisma-1',
        outcome: 'SUCCESSFUL',
        duplicates: 2,
        transactionId: await newOrder('order-prisma-1', 3400),
      });
      const report = await paid.delivered;
      await eventually(
        'the delivered mark',
        async () => (await ledger!.entryOf(`${paid.transactionId}:SUCCESSFUL`))?.status === 'delivered',
      );

      expect(report.statuses).toEqual([200, 200, 200]);
      expect((await pending(paid.transactionId)).rows).toEqual([{ n: 1 }]);
      const rows = await ledger!
        .pool()
        .query('SELECT order_id, amount::int AS amount FROM ledger WHERE transaction_id = $1', [
          paid.transactionId,
        ]);
      expect(rows.rows).toEqual([{ order_id: 'order-prisma-1', amount: 3400 }]);
      expect(lines('prisma ledger order-prisma-1')).toEqual([
        `prisma ledger order-prisma-1: 3400 (${paid.transactionId})`,
      ]);
    });

    test('a listener that fails leaves no ledger row, and the retry credits once', async () => {
      // The ledger refuses this order once (a CHECK dropped after the first attempt fails): the attempt's
      // Prisma transaction rolls back with the inbox mark, and the router's retry credits it.
      await ledger!
        .pool()
        .query(`ALTER TABLE ledger ADD CONSTRAINT not_yet CHECK (order_id <> 'order-prisma-2') NOT VALID`);
      const ipnUrl = `${base}/api/prisma-ipn`;
      const paid = provider.initiate({
        amount: 50,
        ipnUrl,
        customData: 'order-prisma-2',
        outcome: 'SUCCESSFUL',
        transactionId: await newOrder('order-prisma-2', 50),
      });
      const key = `${paid.transactionId}:SUCCESSFUL`;
      expect((await paid.delivered).statuses).toEqual([200]);
      await eventually('a failed attempt', async () => Boolean((await ledger!.entryOf(key))?.last_error));
      expect(await ledger!.ledgerOf(paid.transactionId)).toEqual([]);
      await ledger!.pool().query('ALTER TABLE ledger DROP CONSTRAINT not_yet');
      // The retry comes from the router's own backoff: replay it now rather than wait for it.
      await eventually(
        'the delivered mark',
        async () => {
          await ledger!
            .pool()
            .query(`UPDATE ipn_inbox SET next_attempt_at = now() WHERE key = $1 AND status <> 'delivered'`, [
              key,
            ]);
          return (await ledger!.entryOf(key))?.status === 'delivered';
        },
        45_000,
      );

      expect(await ledger!.ledgerOf(paid.transactionId)).toEqual([{ order_id: 'order-prisma-2' }]);
    });

    test('a payment of another amount, of an unknown order or of an order already paid credits nothing', () =>
      expectNothingCredited('/api/prisma-ipn', 'order-prisma'));
  });
});
