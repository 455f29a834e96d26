import { Pool } from 'pg';
import { creditedOnce } from '../helpers/credited-once.js';
import { servedRouters } from '../helpers/servers.js';
import { ledgerSchema } from '../helpers/ledger-schema.js';
import { databaseUrl, describeWithService } from '../helpers/services.js';
import { ledgerRole } from '../helpers/ledger-role.js';

jest.setTimeout(30_000);

// A pool whose connect event, run as a superuser, sets a setting only a superuser may set and then drops
// to the app's role (row-level security's usual setup). A listener's SET through db makes the mark reset
// the session and set back what the connect event set: the superuser's setting cannot be set back under
// the app's role, and the mark must not fail on it (it did on every retry: the delivery never landed).
describeWithService(
  'PostgreSQL',
  "a listener's SET on a pool that drops to a role after a superuser's SET",
  () => {
    const ledger = ledgerSchema('ipn_rv_role');
    const serve = servedRouters();
    const pools: Pool[] = [];
    const role = ledgerRole(ledger, 'app', pools);

    function connectingPool(): Pool {
      const pool = new Pool({ connectionString: databaseUrl(), max: 1 });
      pool.on('connect', (client) => {
        void client.query(`SET search_path TO ${ledger.schema}`);
        void client.query("SET log_min_duration_statement = '4321'"); // a superuser's setting
        void client.query(`SET ROLE ${role}`);
      });
      pool.on('error', () => {});
      pools.push(pool);
      return pool;
    }

    const settingsOf = async (pool: Pool) =>
      (
        await pool.query<{ role: string; search_path: string; logged: string; work_mem: string }>(
          `SELECT current_user AS role, current_setting('search_path') AS search_path,
        current_setting('log_min_duration_statement') AS logged, current_setting('work_mem') AS work_mem`,
        )
      ).rows[0];

    test.each([
      ['SET work_mem', "SET work_mem = '7MB'", 'SELECT 1'],
      ['SET ROLE of the same role', `SET ROLE ${'$ROLE'}`, 'SELECT 1'],
      // The role shown under a SET LOCAL ROLE is the transaction's: not set back, so it must be left alone.
      ['SET LOCAL ROLE, then SET work_mem', `SET LOCAL ROLE ${'$ROLE'}`, "SET work_mem = '7MB'"],
    ])('%s: credited once, and the connection keeps what its connect event set', async (_, set, next) => {
      const pool = connectingPool();
      const before = await settingsOf(pool);
      expect(before).toEqual({
        role,
        search_path: ledger.schema,
        logged: '4321ms',
        work_mem: expect.any(String),
      });
      await creditedOnce(ledger, serve, pool, async (db) => {
        await db.query(set.replace('$ROLE', role));
        await db.query(next);
      });
      expect(await settingsOf(pool)).toEqual(before);
    });
  },
);
