import { Pool } from 'pg';
import { creditedOnce } from '../helpers/credited-once.js';
import { servedRouters } from '../helpers/servers.js';
import { ledgerSchema } from '../helpers/ledger-schema.js';
import { databaseUrl, describeWithService } from '../helpers/services.js';
import { recordQueries } from '../helpers/ledger-role.js';

jest.setTimeout(30_000);

// A listener that changes a setting of the session through `db` has it undone before the delivery commits
// (RESET ALL): the pooled connection serves the app next. What the pool's `connect` event set on that
// connection before the delivery (a search_path, a statement_timeout) must come back, or the app's next
// queries on it run under the server's defaults: another schema, no timeout.
describeWithService(
  'PostgreSQL',
  "a listener's settings through db, on a pool whose connect event sets some",
  () => {
    const ledger = ledgerSchema('ipn_rv_conn');
    const serve = servedRouters();
    const pools: Pool[] = [];
    const role = `${ledger.schema}_role`;
    beforeAll(async () => {
      await ledger.pool().query(`CREATE ROLE ${role} NOLOGIN`);
      await ledger.pool().query(`GRANT USAGE ON SCHEMA ${ledger.schema} TO ${role}`);
      await ledger.pool().query(`GRANT INSERT ON ${ledger.schema}.ledger TO ${role}`);
    });
    // After ledgerSchema's own (declared first, run first), which drops the schema and so the grants.
    afterAll(async () => {
      await Promise.all(pools.map((pool) => pool.end()));
      const admin = new Pool({ connectionString: databaseUrl(), max: 1 });
      await admin.query(`DROP ROLE IF EXISTS ${role}`).finally(() => admin.end());
    });

    /** One connection, set up by the `connect` event as apps do: no startup parameter. */
    function connectingPool(sent: string[] = []): Pool {
      const pool = new Pool({ connectionString: databaseUrl(), max: 1 });
      pool.on('connect', (client) => {
        recordQueries(client, sent);
        void client.query(`SET search_path TO ${ledger.schema}`);
        void client.query("SET statement_timeout = '12345'");
        // A quote and a backslash: the value is set back through a string literal.
        void client.query(String.raw`SET application_name = 'it''s \ ipn'`);
        // A custom variable: no view lists it, so after a RESET ALL nothing can set it back.
        void client.query("SET app.origin = 'pool'");
      });
      pool.on('error', () => {});
      pools.push(pool);
      return pool;
    }

    const settingsOf = async (pool: Pool) =>
      (
        await pool.query<{
          role: string;
          search_path: string;
          statement_timeout: string;
          app: string;
          work_mem: string;
          origin: string;
        }>(
          `SELECT current_user AS role, current_setting('search_path') AS search_path,
          current_setting('statement_timeout') AS statement_timeout, current_setting('application_name') AS app, current_setting('work_mem') AS work_mem,
          current_setting('app.origin', true) AS origin`,
        )
      ).rows[0];

    /** The settings as the connect event leaves them; `reset`: the custom variable's too. */
    const connected = (origin = 'pool') => ({
      role: expect.any(String),
      search_path: ledger.schema,
      statement_timeout: '12345ms',
      app: String.raw`it's \ ipn`,
      work_mem: expect.any(String),
      origin,
    });

    type Sets = Array<string | [string, unknown[]]>;
    test.each<[string, Sets, ReturnType<typeof connected>]>([
      ['a plain SET', ["SET work_mem = '7MB'"], connected('')],
      [
        "a SET LOCAL of the connect's setting after set_config(..., false)",
        ["SELECT set_config('work_mem', '7MB', false)", "SET LOCAL statement_timeout = '1000'"],
        connected(''),
      ],
      ['SET LOCAL search_path', ['SET LOCAL search_path TO pg_catalog'], connected('')],
      ['RESET ALL', ['RESET ALL'], connected('')],
      // Read before the SET LOCAL: its value is not taken for the session's when RESET ALL follows.
      [
        'SET LOCAL, then RESET ALL',
        ["SET LOCAL statement_timeout = '1000'", "SET LOCAL TIME ZONE 'Asia/Tokyo'", 'RESET ALL'],
        connected(''),
      ],
      ['SET ROLE', [`SET ROLE ${role}`], connected('')],
      ['SET application_name', ["SET application_name = 'listener'"], connected('')],
      // Row-level security's setup: for the transaction alone, so nothing to undo, and no RESET ALL.
      [
        "set_config('app.tenant', $1, true)",
        [["SELECT set_config('app.tenant', $1, true), set_config('app.user', 'u', TRUE)", ['t1']]],
        connected(),
      ],
      ['SET LOCAL', ["SET LOCAL work_mem = '7MB'"], connected()],
    ])('%s: credited once, and the connection keeps what its connect event set', async (_, sets, after) => {
      const pool = connectingPool();
      const defaults = await settingsOf(pool);
      expect(defaults).toEqual(connected());
      await creditedOnce(ledger, serve, pool, async (db) => {
        for (const statement of sets) {
          if (typeof statement === 'string') await db.query(statement);
          else await db.query(...statement);
        }
      });
      expect(await settingsOf(pool)).toEqual({ ...defaults, origin: after.origin });
    });

    // pg_settings shows a SET LOCAL's value as the session's own: the session's settings are read before the
    // SET LOCAL, so the connect event's statement_timeout comes back after the plain SET's RESET ALL (it went
    // to the server's default when they were read before the plain SET alone).
    test.each([
      ['SET LOCAL', "SET LOCAL statement_timeout = '1000'"],
      ['SET LOCAL TIME ZONE', "SET LOCAL TIME ZONE 'Asia/Tokyo'"],
      [
        "set_config(..., true) of the connect's setting",
        "SELECT set_config('statement_timeout', '1000', true)",
      ],
    ])("%s before a plain SET: the connect event's setting comes back", async (_, local) => {
      const pool = connectingPool();
      await pool.query("SET TIME ZONE 'America/Lima'");
      const zone = async () =>
        (await pool.query<{ zone: string }>("SELECT current_setting('TimeZone') AS zone")).rows[0]!.zone;
      const before = await settingsOf(pool);
      await creditedOnce(ledger, serve, pool, async (db) => {
        await db.query(local);
        await db.query("SET work_mem = '7MB'");
      });
      expect(await settingsOf(pool)).toEqual({ ...before, origin: '' });
      expect(await zone()).toBe('America/Lima');
    });

    // A custom variable set for the transaction alone (row-level security's setup) costs no read of the
    // settings, and does not outlive the delivery when a plain SET follows.
    test('set_config of a custom variable for the transaction, then a plain SET: neither outlives it', async () => {
      const sent: string[] = [];
      const pool = connectingPool(sent);
      const before = await settingsOf(pool);
      const snapshots = () => sent.filter((text) => text.includes('json_object_agg')).length;
      await creditedOnce(ledger, serve, pool, async (db) => {
        await db.query("SELECT set_config('app.tenant', 't1', true)");
        expect(snapshots()).toBe(0); // no read of the settings for it
        await db.query("SET work_mem = '7MB'");
        expect(snapshots()).toBe(1);
      });
      expect(await settingsOf(pool)).toEqual({ ...before, origin: '' });
      const { rows } = await pool.query<{ tenant: string | null }>(
        "SELECT current_setting('app.tenant', true) AS tenant",
      );
      expect(rows[0]!.tenant ?? '').toBe('');
    });
  },
);
