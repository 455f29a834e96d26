import { copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { Pool } from 'pg';
import { PostgresStore } from '../../lib/postgres.js';
import { uniquePayload } from '../helpers/payloads.js';
import {
  expectNothingCredited,
  insertOrder,
  orderOf,
  orderPayment,
  ORDERS,
} from '../helpers/refused-payments.js';
import { databaseUrl, describeWithService, eventually } from '../helpers/services.js';
import { packedApp, ROOT } from './packed.js';
import { describeWithRuntime, wranglerDev } from './runtime-process.js';

/**
 * The documented Worker with PostgreSQL (examples/runtimes/worker-postgres.ts), run by wrangler 4.86 in
 * workerd, ipn-kit from the tarball and `pg` bundled by wrangler (its `pg-cloudflare` socket, over
 * `cloudflare:sockets`), against the local PostgreSQL. A pool, store and router per request: several
 * sequential requests prove that no socket of one request is used by the next (that is a 503 after 5 s).
 * Then the cost per request against the MemoryStore Worker, printed, not asserted.
 */

let dir = '';
const table = `ipn_workers_${process.pid}_${Date.now()}`;
let pool: Pool | undefined;
/** The partner's orders and ledger, in a schema of this run, before `public` (the inbox) in the Worker's path. */
const partner = `${table}_partner`;
let partnerPool: Pool | undefined;

const FILES = [
  'examples/runtimes/worker-postgres.ts',
  'examples/runtimes/worker.ts',
  'examples/runtimes/wrangler.toml',
];

async function post(url: string, body: string) {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

async function rows(transactionId: string): Promise<Array<{ status: string }>> {
  const result = await pool!.query<{ status: string }>(
    `SELECT status FROM "${table}" WHERE transaction_id = $1`,
    [transactionId],
  );
  return result.rows;
}

/** Median of `count` sequential first POSTs (each a new notification), in ms. */
async function medianLatency(url: string, count: number): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < count; i += 1) {
    const body = JSON.stringify(uniquePayload());
    const start = performance.now();
    const answer = await post(url, body);
    times.push(performance.now() - start);
    expect(answer.status).toBe(200);
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length / 2)]!;
}

describeWithRuntime('wrangler', 'Cloudflare Workers with PostgreSQL (workerd, wrangler 4.86)', () => {
  describeWithService('PostgreSQL', 'a pool, PostgresStore and router per request', () => {
    beforeAll(async () => {
      dir = mkdtempSync(join(packedApp(), 'workers-pg-'));
      for (const file of FILES) {
        mkdirSync(dirname(join(dir, file)), { recursive: true });
        copyFileSync(join(ROOT, file), join(dir, file));
      }
      // `pg` as the user installs it beside ipn-kit (the version of our devDependencies); wrangler resolves
      // it through the link to its real folder, where pg-cloudflare is, and picks its workerd build.
      mkdirSync(join(dir, 'node_modules'));
      symlinkSync(join(ROOT, 'node_modules/pg'), join(dir, 'node_modules/pg'), 'dir');
      // How wrangler dev reads a secret locally.
      const partnerUrl = new URL(databaseUrl());
      partnerUrl.searchParams.set('options', `-c search_path=${partner},public`);
      writeFileSync(
        join(dir, 'examples/runtimes/.dev.vars'),
        `DATABASE_URL=${partnerUrl.toString()}\nIPN_TABLE=${table}\n`,
      );
      pool = new Pool({ connectionString: databaseUrl() });
      await new PostgresStore({ pool, table }).migrate();
      await pool.query(`CREATE SCHEMA ${partner}`);
      partnerPool = new Pool({ connectionString: partnerUrl.toString(), max: 2, idleTimeoutMillis: 500 });
      await partnerPool.query(ORDERS);
      await partnerPool.query(
        'CREATE TABLE ledger (transaction_id text NOT NULL, order_id text NOT NULL, amount numeric)',
      );
    }, 300_000);

    afterAll(async () => {
      await pool?.query(`DROP TABLE IF EXISTS "${table}", "${table}_expected"`);
      await pool?.query(`DROP SCHEMA IF EXISTS ${partner} CASCADE`);
      await partnerPool?.end();
      await pool?.end();
      rmSync(dir, { recursive: true, force: true });
    });

    test('sequential requests: each first POST 200 and delivered once, each resend a duplicate, no 503', async () => {
      const server = await wranglerDev(dir, 'worker-postgres.ts', '--test-scheduled');
      try {
        for (let i = 0; i < 6; i += 1) {
          const notification = orderPayment();
          await insertOrder(partnerPool!, orderOf(notification));
          const body = JSON.stringify(notification);
          expect(await post(server.url, body)).toEqual({ status: 200, body: { ok: true } });
          expect(await post(server.url, body)).toEqual({ status: 200, body: { ok: true, duplicate: true } });
          const id = String(notification.transaction_id);
          // The listener's transaction committed under ctx.waitUntil: the row is marked delivered.
          await eventually(`${id} delivered`, async () => (await rows(id))[0]?.status === 'delivered');
          expect(await rows(id)).toEqual([{ status: 'delivered' }]);
          const credited = await partnerPool!.query('SELECT order_id FROM ledger WHERE transaction_id = $1', [
            id,
          ]);
          expect(credited.rows).toEqual([{ order_id: notification.custom_data }]);
        }
        // Another amount, another transaction, an unknown order, an order already paid: nothing credited.
        await expectNothingCredited(
          partnerPool!,
          (body) => post(server.url, JSON.stringify(body)),
          `"${table}"`,
        );
        // The failure of a pool kept across requests: a 503 after 5 s, "Stream was cancelled", or workerd's
        // "Cannot perform I/O on behalf of a different request". (The example does not log the cancelled read
        // pg-cloudflare reports when its own pool ends.)
        // The Cron Trigger's handler (wrangler's --test-scheduled route): its own pool and router, one drain.
        expect((await fetch(`${server.url}/__scheduled?cron=*+*+*+*+*`)).status).toBe(200);
        await eventually('the drain logged its counts', () =>
          /ipn drain \{"delivered":\d+/.test(server.output()),
        );
        expect(server.output()).not.toMatch(/ 503 |Stream was cancelled|on behalf of a different request/);
      } catch (error) {
        throw new Error(`${String(error)}\nwrangler's output:\n${server.output()}`);
      } finally {
        await server.stop();
      }
    }, 120_000);

    test('what it costs per request, against the MemoryStore Worker (printed, not asserted)', async () => {
      const count = 50;
      const medians: Record<string, number> = {};
      const workers: Array<[string, string]> = [
        ['MemoryStore, router at module scope', 'worker.ts'],
        ['PostgresStore, pool and router per request', 'worker-postgres.ts'],
      ];
      for (const [name, entry] of workers) {
        const server = await wranglerDev(dir, entry);
        try {
          await post(server.url, JSON.stringify(uniquePayload())); // warm-up: the first request builds things
          medians[name] = await medianLatency(server.url, count);
        } finally {
          await server.stop();
        }
      }
      console.log(
        `Workers, median of ${count} sequential first POSTs on this machine (local workerd, local PostgreSQL):\n` +
          Object.entries(medians)
            .map(([name, ms]) => `  ${name}: ${ms.toFixed(1)} ms`)
            .join('\n'),
      );
    }, 180_000);
  });
});
