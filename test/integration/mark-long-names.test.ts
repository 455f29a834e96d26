import { Pool } from 'pg';
import { ipnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { uniquePayload } from '../helpers/payloads.js';
import { fastRetries } from '../helpers/fast-retries.js';
import { servedRouters } from '../helpers/servers.js';
import { databaseUrl, describeWithService, eventually } from '../helpers/services.js';

jest.setTimeout(30_000);

// Two inboxes whose names share their first 58 bytes: `<table>_mark` is cut to 63 bytes, and the same name
// must not stand for both stores' mark functions (the second migrate() would replace the first's).
describeWithService('PostgreSQL', 'mark functions of two long inbox names that share 58 bytes', () => {
  const schema = `rv_long_${process.pid}_${Date.now() % 100_000}`;
  const stem = 'q'.repeat(58);
  const first = `${schema}.${stem}_one`;
  const second = `${schema}.${stem}_two`;
  const pool = new Pool({ connectionString: databaseUrl(), max: 4, idleTimeoutMillis: 500 });
  pool.on('error', () => {});
  const serve = servedRouters();
  beforeAll(async () => {
    await pool.query(`CREATE SCHEMA ${schema}`);
    await pool.query(`CREATE TABLE ${schema}.ledger (transaction_id text NOT NULL)`);
  });
  afterAll(async () => {
    await pool.query(`DROP SCHEMA ${schema} CASCADE`);
    await pool.end();
  });

  test('each store credits its payment once', async () => {
    for (const table of [first, second]) await new PostgresStore({ pool, table }).migrate();
    for (const table of [first, second]) {
      const store = new PostgresStore({ pool, table });
      const ipn = ipnRouter({
        store,
        ...fastRetries,
        leaseMs: 500,
      });
      ipn.on('successful', async (n, { db }) => {
        await db.query(`INSERT INTO ${schema}.ledger (transaction_id) VALUES ($1)`, [n.transaction_id]);
      });
      const { post } = await serve(ipn);
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      await eventually(
        `${table}: delivered`,
        async () => (await store.get(`${String(payload.transaction_id)}:SUCCESSFUL`))?.status === 'delivered',
        4_000,
      );
      const { rows } = await pool.query(
        `SELECT count(*)::int AS n FROM ${schema}.ledger WHERE transaction_id = $1`,
        [payload.transaction_id],
      );
      expect(rows[0].n).toBe(1);
    }
  });
});
