import { Pool } from 'pg';
import { ipnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { fastRetries } from '../helpers/fast-retries.js';
import { ledgerSchema } from '../helpers/ledger-schema.js';
import { uniquePayload } from '../helpers/payloads.js';
import { servedRouters } from '../helpers/servers.js';
import { databaseUrl, describeWithService, eventually } from '../helpers/services.js';
import { ledgerRole, recordQueries } from '../helpers/ledger-role.js';

jest.setTimeout(30_000);

// The mark of a delivery whose listener sent a SET through db resets the session and sets back what the
// connect event set, as the session user, in the query that calls the mark function. Here the connect
// event set a superuser's setting and then changed the session user to a role that may not set it: the
// set-back is refused (42501, the SQLSTATE of a refused EXECUTE too). That must be reported as itself, and
// must not turn the mark function off: every later mark of the store would be a DO block.
describeWithService('PostgreSQL', "a refused set-back of the session's settings", () => {
  const ledger = ledgerSchema('ipn_rv_back');
  const serve = servedRouters();
  const pools: Pool[] = [];
  const role = ledgerRole(ledger, 'user', pools);

  test('reported as the set-back, and the mark function stays in use', async () => {
    const sent: string[] = [];
    const pool = new Pool({ connectionString: databaseUrl(), max: 1 });
    pool.on('connect', (client) => {
      recordQueries(client, sent);
      void client.query(`SET search_path TO ${ledger.schema}`);
      void client.query("SET log_min_duration_statement = '4321'"); // a superuser's setting
      void client.query(`SET SESSION AUTHORIZATION ${role}`);
    });
    pool.on('error', () => {});
    pools.push(pool);
    let setsWorkMem = true;
    const ipn = ipnRouter({ store: new PostgresStore({ pool }), ...fastRetries });
    ipn.on('error', () => {});
    ipn.on('successful', async (n, { db }) => {
      if (setsWorkMem) await db.query("SET work_mem = '7MB'");
      await db.query(`INSERT INTO ${ledger.schema}.ledger (transaction_id, order_id) VALUES ($1, 'x')`, [
        n.transaction_id,
      ]);
    });
    const { post } = await serve(ipn);
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    const key = ledger.keyOf(payload);
    await eventually('refused', async () => ((await ledger.entryOf(key))?.attempts ?? 0) >= 2, 5_000);
    const failed = await ledger.entryOf(key);
    expect(failed?.status).not.toBe('delivered');
    expect(failed?.last_error).toContain("setting back the session's settings");
    expect(failed?.last_error).toContain('permission denied to set parameter');
    expect(failed?.last_error).not.toContain('mark of schema version 6');
    expect(await ledger.ledgerOf(payload.transaction_id)).toEqual([]);

    setsWorkMem = false;
    await eventually('delivered', async () => (await ledger.entryOf(key))?.status === 'delivered', 5_000);
    expect(await ledger.ledgerOf(payload.transaction_id)).toEqual([{ order_id: 'x' }]);
    // Every mark called the function, the refused ones and the one that delivered after them: none was
    // sent as a DO block.
    expect(sent.filter((text) => text.includes('DO $ipn_kit$'))).toEqual([]);
    expect(sent.filter((text) => /_mark"?\(/.test(text)).length).toBeGreaterThanOrEqual(2);
  });
});
