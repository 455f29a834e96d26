import { createHash } from 'node:crypto';
import { createPool, type RowDataPacket } from 'mysql2/promise';
import { Pool } from 'pg';
import { MysqlStore } from 'ipn-kit/mysql';
import { PostgresStore } from 'ipn-kit/postgres';
import { CLEANUP_TIMEOUT_MS, dropMysqlInboxes } from '../helpers/drop-inboxes.js';
import { databaseUrl, describeWithService, eventually, mysqlUrl } from '../helpers/services.js';

jest.setTimeout(30_000);

/** `store.migrate()` started, and whether it has settled yet. */
function migrating(store: { migrate(): Promise<unknown> }) {
  let settled = false;
  const migrated = store.migrate().finally(() => {
    settled = true;
  });
  return { migrated, settled: () => settled };
}

// `inbox` (on a search_path that resolves it to schema s) and `s.inbox` are one table: two processes that
// migrate it at once, one with each spelling, must take turns on the same advisory lock. They took a lock
// keyed by the name as given, so they ran at once (a bare CREATE TABLE IF NOT EXISTS can then fail with a
// unique violation). Seen through the lock: a session holds the lock one spelling took (as an instance of
// an earlier ipn-kit still does), and the other spelling's migrate() is found waiting on an advisory lock
// in pg_stat_activity.
describeWithService('PostgreSQL', 'migrate() of one table named with and without its schema', () => {
  const schema = `ipn_mlock_${process.pid}_${Date.now() % 100_000}`;
  const pools: Pool[] = [];
  const pool = (name: string): Pool => {
    const made = new Pool({
      connectionString: databaseUrl(),
      max: 1,
      application_name: name,
      options: `-c search_path=${schema}`,
    });
    made.on('error', () => {});
    pools.push(made);
    return made;
  };
  beforeAll(async () => {
    const admin = new Pool({ connectionString: databaseUrl(), max: 1 });
    await admin.query(`CREATE SCHEMA ${schema}`).finally(() => admin.end());
  });
  afterAll(async () => {
    const admin = new Pool({ connectionString: databaseUrl(), max: 1 });
    await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).finally(() => admin.end());
    await Promise.all(pools.map((each) => each.end()));
  });

  test.each([
    ['held as the qualified name, migrated unqualified', 'inbox_a', true],
    ['held as the unqualified name, migrated qualified', 'inbox_b', false],
  ])('%s: migrate() waits for the lock', async (_, table, heldQualified) => {
    const quoted = heldQualified ? `"${schema}"."${table}"` : `"${table}"`;
    const holder = await pool(`${schema}_holder`).connect();
    const name = `${schema}_${table}`;
    const onPool = pool(name);
    const watcher = pool(`${schema}_watcher`);
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT pg_advisory_xact_lock(${0x69706e6b}, hashtext($1))`, [quoted]);
      const { migrated, settled } = migrating(
        new PostgresStore({ pool: onPool, table: heldQualified ? table : `${schema}.${table}` }),
      );
      await eventually(
        'migrate() waits on the advisory lock',
        async () =>
          (
            await watcher.query(
              `SELECT FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'
                AND wait_event = 'advisory'`,
              [name],
            )
          ).rowCount === 1,
        10_000,
      );
      expect(settled()).toBe(false);
      await holder.query('COMMIT');
      await migrated;
      const { rows } = await watcher.query<{ found: boolean }>(
        'SELECT to_regclass($1) IS NOT NULL AS found',
        [`${schema}.${table}`],
      );
      expect(rows[0]!.found).toBe(true);
    } finally {
      await holder.query('ROLLBACK').catch(() => {});
      holder.release();
    }
  });
});

// The same on MySQL, whose migrate() took a named lock (GET_LOCK) keyed by the name as given: `inbox` and
// `<database>.inbox` took two.
describeWithService(
  'MariaDB',
  'MysqlStore.migrate() of one table named with and without its database',
  () => {
    const pool = createPool({ uri: mysqlUrl(), connectionLimit: 4 });
    const prefix = `ipn_mlock_${process.pid}_${Date.now() % 100_000}`;
    const tables: string[] = [];
    afterAll(async () => {
      await dropMysqlInboxes(pool, tables);
      await pool.end();
    }, CLEANUP_TIMEOUT_MS);
    const lockOf = (name: string) => `ipn-kit:${createHash('sha1').update(name).digest('hex')}`;

    test.each([
      ['held as the qualified name, migrated unqualified', 'a', true],
      ['held as the unqualified name, migrated qualified', 'b', false],
    ])('%s: migrate() waits for the lock', async (_, suffix, heldQualified) => {
      const table = `${prefix}_${suffix}`;
      tables.push(table);
      const [named] = await pool.query<RowDataPacket[]>('SELECT DATABASE() AS `database`');
      const database = String(named[0]!.database);
      const held = lockOf(heldQualified ? `${database}.${table}` : table);
      const holder = await pool.getConnection();
      try {
        const [locked] = await holder.query<RowDataPacket[]>('SELECT GET_LOCK(?, 5) AS locked', [held]);
        expect(Number(locked[0]!.locked)).toBe(1);
        const { migrated, settled } = migrating(
          new MysqlStore({ pool, table: heldQualified ? table : `${database}.${table}` }),
        );
        await eventually(
          'migrate() waits on the named lock',
          async () =>
            (
              await pool.query<RowDataPacket[]>(
                `SELECT 1 FROM information_schema.processlist WHERE info LIKE ? AND id <> CONNECTION_ID()`,
                [`%GET_LOCK('${held}'%`],
              )
            )[0].length === 1,
          10_000,
        );
        expect(settled()).toBe(false);
        await holder.query('SELECT RELEASE_LOCK(?)', [held]);
        await migrated;
        const [found] = await pool.query<RowDataPacket[]>(
          'SELECT 1 FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?',
          [table],
        );
        expect(found).toHaveLength(1);
      } finally {
        holder.release();
      }
    });
  },
);
