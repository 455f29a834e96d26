import { randomBytes } from 'node:crypto';
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Pool } from 'pg';
import { PostgresStore } from '../../lib/postgres.js';
import { databaseUrl, describeWithService, eventually } from '../helpers/services.js';
import {
  expectNothingCredited,
  insertOrder,
  orderOf,
  orderPayment,
  ORDERS,
} from '../helpers/refused-payments.js';
import { describeIpnAnswers } from './ipn-answers.js';
import { packedApp, ROOT } from './packed.js';
import { binary, describeWithRuntime, startServer, type RuntimeServer } from './runtime-process.js';

/**
 * The documented Supabase Edge Function (examples/runtimes/supabase.ts): `Deno.serve`, `PostgresStore` over
 * `pg`, the router at module scope, run by the `deno` devDependency with exactly the documented permissions
 * (a missing one throws `NotCapable`), against the local PostgreSQL. ipn-kit comes from the packed tarball,
 * `pg` from the project's node_modules: both are linked into a scratch project's node_modules, from which
 * Deno 2 resolves the bare imports by itself (as `deno.json` imports of `npm:` specifiers do on Supabase).
 *
 * Each run has a schema of its own: the connection URL sets its `search_path`, so the function's store uses
 * the default table name (`ipn_inbox`) as the documented file does, and the test reads that table.
 */
const PERMISSIONS = ['--allow-net', '--allow-env=SUPABASE_DB_URL,DATABASE_URL,PG*'];

describeWithRuntime('deno', 'a Supabase Edge Function: Deno.serve, PostgresStore over pg', () => {
  describeWithService('PostgreSQL', 'the function against PostgreSQL', () => {
    const schema = `ipn_supabase_${process.pid}_${randomBytes(3).toString('hex')}`;
    let pool: Pool;
    /** On the schema: the partner's orders and ledger. */
    let partnerPool: Pool;
    let server: RuntimeServer | undefined;
    let app: string | undefined;

    beforeAll(async () => {
      pool = new Pool({ connectionString: databaseUrl(), max: 2 });
      pool.on('error', () => {});
      await pool.query(`CREATE SCHEMA ${schema}`);
      await new PostgresStore({ pool, table: `${schema}.ipn_inbox` }).migrate();
      const url = new URL(databaseUrl());
      url.searchParams.set('options', `-c search_path=${schema}`);
      partnerPool = new Pool({ connectionString: url.toString(), max: 2, idleTimeoutMillis: 500 });
      partnerPool.on('error', () => {});
      await partnerPool.query(ORDERS);
      await partnerPool.query(
        'CREATE TABLE ledger (transaction_id text NOT NULL, order_id text NOT NULL, amount numeric)',
      );

      const packed = packedApp();
      app = mkdtempSync(join(tmpdir(), 'ipn-kit-supabase-'));
      mkdirSync(join(app, 'node_modules'));
      writeFileSync(join(app, 'package.json'), JSON.stringify({ private: true, type: 'module' }));
      symlinkSync(realpathSync(join(packed, 'node_modules/ipn-kit')), join(app, 'node_modules/ipn-kit'));
      symlinkSync(realpathSync(join(ROOT, 'node_modules/pg')), join(app, 'node_modules/pg'));
      copyFileSync(join(ROOT, 'examples/runtimes/supabase.ts'), join(app, 'supabase.ts'));

      server = await startServer(binary('deno'), ['run', ...PERMISSIONS, 'supabase.ts'], {
        cwd: app,
        env: {
          SUPABASE_DB_URL: url.toString(),
          DATABASE_URL: '', // Supabase's name comes first: this one would not be read
          // Where Deno.serve() listens when given no port: a free one here (Supabase chooses its own).
          DENO_SERVE_ADDRESS: 'tcp:127.0.0.1:0',
          DENO_NO_UPDATE_CHECK: '1',
        },
        ready: /Listening on http:\/\/[^:/]+:(\d+)/,
      });
    }, 300_000); // the first run of a change to lib/ packs and installs the tarball

    afterAll(async () => {
      await server?.stop();
      await pool?.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await partnerPool?.end();
      await pool?.end();
      if (app !== undefined) rmSync(app, { recursive: true, force: true });
    });

    describeIpnAnswers(() => server!.url);

    const post = (body: unknown) =>
      fetch(server!.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });

    test('the notification is in the inbox table, delivered once the listener credited its order', async () => {
      const payload = orderPayment();
      await insertOrder(partnerPool, orderOf(payload));
      const id = String(payload.transaction_id);
      expect((await post(payload)).status).toBe(200);
      await eventually('the listener ran', () => server!.output().includes(`credited ${id}`));
      const row = async () =>
        (
          await pool.query<{ status: string; attempts: number }>(
            `SELECT status, attempts FROM ${schema}.ipn_inbox WHERE key = $1`,
            [`${id}:SUCCESSFUL`],
          )
        ).rows[0];
      await eventually('the row is delivered', async () => (await row())?.status === 'delivered');
      expect(await row()).toEqual({ status: 'delivered', attempts: 1 });
      const credited = await partnerPool.query('SELECT order_id FROM ledger WHERE transaction_id = $1', [id]);
      expect(credited.rows).toEqual([{ order_id: payload.custom_data }]);
      // The function's error listener reports the failures of its listener (here, those of the payments of
      // describeIpnAnswers, which no order was initiated for): ipn-kit logs no ERROR line of its own.
      expect(server!.output()).not.toMatch(/NotCapable|ERROR/);
    });

    test('another amount, another transaction, an unknown order, an order already paid: nothing credited', () =>
      expectNothingCredited(partnerPool, post));
  });
});
