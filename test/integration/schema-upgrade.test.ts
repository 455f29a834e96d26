import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { createPool, type Pool as MysqlPool } from 'mysql2/promise';
import { Pool } from 'pg';
import { ipnRouter, StoreError, type DurableStore } from '../../lib/index.js';
import { runCli } from '../../lib/cli/run-cli.js';
import { MysqlStore, mysqlMigrations } from '../../lib/mysql.js';
import { PostgresStore, postgresMigrations } from '../../lib/postgres.js';
import { SqliteStore, sqliteMigrations } from '../../lib/sqlite.js';
import type { MigrateOptions, MigrationReport, SchemaMigration } from '../../lib/postgres.js';
import { successfulPayload } from '../helpers/payloads.js';
import { postTo } from '../helpers/refusing-router.js';
import { quiet } from '../helpers/quiet-logger.js';
import { databaseUrl, describeWithService, eventually, mysqlUrl } from '../helpers/services.js';

/**
 * Upgrades from ipn-kit 0.1.0's schema (test/fixtures/schema-0.1.0, generated from the commits that made
 * it): the tables are made as 0.1.0 made them and filled as 0.1.0 filled them, an entry in every status,
 * then `migrate()` runs, and a router delivers the due entries exactly once and nothing else again.
 */

const FIXTURES = join(__dirname, '../fixtures/schema-0.1.0');
/** The fixture's SQL for inbox `table` (the fixtures are generated for `ipn_inbox`). */
const fixture = (file: string, table: string): string =>
  readFileSync(join(FIXTURES, file), 'utf8').replaceAll('ipn_inbox', table);

/** The latest schema version: the same number in every dialect. */
const LATEST = postgresMigrations().length;
/** Every version, 1 to the latest. */
const ALL = postgresMigrations().map((m) => m.version);

type Migrating = DurableStore & {
  migrate(): Promise<void>;
  migrateSchema(options?: MigrateOptions): Promise<MigrationReport>;
};

/** What a dialect's scenarios need. */
interface Dialect {
  /** Runs the statements of a fixture, or any text of `;`-separated statements. */
  run(sql: string): Promise<void>;
  /** Rows of `sql`, a SELECT. */
  rows(sql: string): Promise<Array<Record<string, unknown>>>;
  /** A store over a connection of its own (a second instance, a second process). */
  store(table: string): Migrating;
  /** `ms` milliseconds from the database's now (or the app's, for SQLite), as a SQL expression. */
  at(ms: number): string;
  /** A SQL text literal. */
  text(value: string): string;
  /** The quoted name of a table. */
  quote(name: string): string;
  /** The tables a dialect's schema has, and the version table. */
  migrations(table: string): SchemaMigration[];
  /** Whether `name` is a table. */
  exists(name: string): Promise<boolean>;
  /** Drops the tables of `table`'s set. */
  drop(table: string): Promise<void>;
}

/** The set's tables beside the inbox. */
const SUFFIXES = ['', '_expected', '_states', '_audit'] as const;

/** What `drop` drops: the set's tables, the control and version tables. */
const DROPPED = [...SUFFIXES, '_control', '_claims', '_schema'] as const;

/** Transaction ids of the seeded entries, one per status. */
const ID = {
  received: 'EFB.9000001', // received, its attempt's lease run out (a crash): due
  failed: 'EFB.9000002', // failed, its retry due
  later: 'EFB.9000003', // failed, its retry due tomorrow
  dead: 'EFB.9000004',
  delivered: 'EFB.9000005',
  claimed: 'EFB.9000006', // an at-most-once claim: a delivered row with an empty record
} as const;
const key = (id: string): string => `${id}:SUCCESSFUL`;
/** Whether a record as a driver reads it (jsonb as an object) is `{}`. */
const isEmpty = (value: unknown): boolean =>
  typeof value === 'object' && value !== null && Object.keys(value).length === 0;
const record = (id: string): string => JSON.stringify(successfulPayload({ transaction_id: id }));

/** Fills the tables as ipn-kit 0.1.0 wrote them: an entry in every status, and (`full`) the other tables. */
async function seed(d: Dialect, table: string, full: boolean): Promise<void> {
  const t = d.quote(table);
  const hour = 3_600_000;
  const row = (
    id: string,
    status: string,
    attempts: number,
    fields: {
      record?: string;
      error?: string;
      next?: number;
      delivered?: number;
      lease?: string;
      until?: number;
    },
  ): string =>
    `(${d.text(key(id))}, ${d.text(id)}, 'SUCCESSFUL', ${d.text(fields.record ?? record(id))}, ${d.text(status)}, ` +
    `${attempts}, ${fields.error === undefined ? 'NULL' : d.text(fields.error)}, ${d.at(-2 * hour)}, ${d.at(-hour)}, ` +
    `${d.at(fields.next ?? -hour)}, ${fields.delivered === undefined ? 'NULL' : d.at(fields.delivered)}, ` +
    `${fields.lease === undefined ? 'NULL' : d.text(fields.lease)}, ${fields.until === undefined ? 'NULL' : d.at(fields.until)})`;
  await d.run(
    `INSERT INTO ${t} (${d.quote('key')}, transaction_id, state, record, status, attempts, last_error, received_at, ` +
      `updated_at, next_attempt_at, delivered_at, lease_id, lease_until) VALUES ` +
      [
        row(ID.received, 'received', 1, { lease: 'lease-of-a-crashed-process', until: -hour / 2 }),
        row(ID.failed, 'failed', 2, { error: 'the ledger was down', next: -60_000 }),
        row(ID.later, 'failed', 1, { error: 'the ledger was down', next: 24 * hour }),
        row(ID.dead, 'dead', 5, { error: 'gave up' }),
        row(ID.delivered, 'delivered', 1, { delivered: -hour }),
        row(ID.claimed, 'delivered', 0, { record: '{}', delivered: -hour, lease: 'claim-token' }),
      ].join(', '),
  );
  if (!full) return;
  await d.run(
    `INSERT INTO ${d.quote(`${table}_expected`)} (transaction_id, custom_data, amount, expected_at, due_at, attempts) ` +
      `VALUES ('EFB.9000100', '{"orderId":"order-7"}', 5000, ${Date.now() - hour}, ${Date.now() + 24 * hour}, 0), ` +
      // The expectations sweep's lock, a row under an id no transaction has.
      `('', 'an-instance', NULL, 0, ${Date.now() - hour}, 0)`,
  );
  await d.run(
    `INSERT INTO ${d.quote(`${table}_states`)} (transaction_id, state, decided_at) VALUES ` +
      `(${d.text(ID.delivered)}, 'SUCCESSFUL', ${d.at(-hour)})`,
  );
}

/** Every row of every table of the set that exists, to compare before and after. */
async function snapshot(d: Dialect, table: string): Promise<Record<string, Array<Record<string, unknown>>>> {
  const tables: Record<string, Array<Record<string, unknown>>> = {};
  for (const suffix of SUFFIXES) {
    const name = `${table}${suffix}`;
    if (await d.exists(name))
      tables[suffix || 'inbox'] = await d.rows(`SELECT * FROM ${d.quote(name)} ORDER BY 1`);
  }
  return tables;
}

function scenarios(d: () => Dialect, prefix: string, fixtures: Array<{ file: string; full: boolean }>): void {
  const tables: string[] = [];
  const fresh = (): string => {
    const table = `${prefix}_${randomUUID().slice(0, 8)}`;
    tables.push(table);
    return table;
  };
  afterAll(async () => {
    for (const table of tables) await d().drop(table);
  });

  test.each(fixtures)(
    'a database made by 0.1.0 ($file), an entry in every status, is migrated, then delivered exactly once',
    async ({ file, full }) => {
      const dialect = d();
      const table = fresh();
      await dialect.run(fixture(file, table));
      await seed(dialect, table, full);
      const before = await snapshot(dialect, table);
      expect((before.inbox as unknown[]).length).toBe(6);

      const store = dialect.store(table);
      const report = await store.migrateSchema();
      expect(report.from).toBe(0);
      expect(report.to).toBe(LATEST);
      expect(report.migrations.map((m) => m.version)).toEqual(ALL);
      // Nothing lost, nothing changed: every row as it was, and the tables 0.1.0 lacked are there now.
      const after = await snapshot(dialect, table);
      // (Columns a later version added, such as the expectations' account, are read as they were not there.)
      const columnsOf = (rows: Array<Record<string, unknown>>) =>
        new Set(rows.flatMap((row) => Object.keys(row)));
      // (But the sweep's lock, a row of _expected in 0.1.0, is the row 'sweep' of _control since version 5.
      // A claim, a row of the inbox with an empty record in 0.1.0, stays there for 0.1.0's release to delete;
      // MySQL marks it in last_error, for version 7's CHECK to let it be.)
      const isLock = (row: Record<string, unknown>) => row.transaction_id === '';
      const isClaim = (row: Record<string, unknown>) => row.record === '{}' || isEmpty(row.record);
      const unmarked = (name: string, row: Record<string, unknown>) =>
        name === 'inbox' && isClaim(row)
          ? Object.fromEntries(Object.entries(row).filter(([column]) => column !== 'last_error'))
          : row;
      for (const [name, rows] of Object.entries(before)) {
        const kept = columnsOf(rows);
        const seen = (after[name] ?? []).map((row) =>
          Object.fromEntries(Object.entries(row).filter(([column]) => kept.has(column))),
        );
        const moved = name === '_expected' ? isLock : () => false;
        expect(seen.map((row) => unmarked(name, row))).toEqual(
          rows.filter((row) => !moved(row)).map((row) => unmarked(name, row)),
        );
      }
      expect((after.inbox ?? []).length).toBe(6);
      const claims = await dialect.rows(
        `SELECT ${dialect.quote('key')}, token FROM ${dialect.quote(`${table}_claims`)}`,
      );
      expect(claims).toEqual([]);
      const lock = (before._expected ?? []).find(isLock);
      expect(lock === undefined).toBe(!full);
      const control = await dialect.rows(
        `SELECT name, value, until_ms FROM ${dialect.quote(`${table}_control`)} WHERE name = 'sweep'`,
      );
      expect(control.map((row) => ({ ...row, until_ms: Number(row.until_ms) }))).toEqual(
        lock === undefined ? [] : [{ name: 'sweep', value: 'an-instance', until_ms: Number(lock.due_at) }],
      );
      expect(Object.keys(after).sort()).toEqual(['_audit', '_expected', '_states', 'inbox']);
      const versions = await dialect.rows(
        `SELECT version FROM ${dialect.quote(`${table}_schema`)} ORDER BY version`,
      );
      expect(versions.map((v) => Number(v.version))).toEqual(ALL);
      // A second migrate() (the next start) has nothing to do.
      expect(await store.migrateSchema()).toEqual({ from: LATEST, to: LATEST, migrations: [] });

      const delivered: string[] = [];
      const start = () => {
        const ipn = ipnRouter({
          store: dialect.store(table),
          delivery: 'at-least-once',
          logger: quiet,
          acknowledgeUnprotected: true,
          retryDelayMs: 50,
        });
        ipn.on('successful', (n) => {
          delivered.push(n.transaction_id);
        });
        ipn.on('error', () => {});
        return ipn;
      };
      const first = start();
      await eventually('the due entries are delivered', async () => {
        const [a, b] = await Promise.all([store.get(key(ID.received)), store.get(key(ID.failed))]);
        return a?.status === 'delivered' && b?.status === 'delivered';
      });
      // Resends of what 0.1.0 delivered (and claimed) are duplicates, never delivered again.
      expect(await postTo(first, successfulPayload({ transaction_id: ID.delivered }))).toBe(200);
      expect(await postTo(first, successfulPayload({ transaction_id: ID.claimed }))).toBe(200);
      await first.drain();
      await first.close();
      // A restart: its recovery pass finds nothing more to deliver.
      const second = start();
      await second.drain();
      await second.close();

      expect(delivered.sort()).toEqual([ID.received, ID.failed].sort());
      expect((await store.get(key(ID.later)))?.status).toBe('failed');
      expect((await store.get(key(ID.dead)))?.status).toBe('dead');
      expect((await store.get(key(ID.delivered)))?.status).toBe('delivered');
      // The key 0.1.0 claimed is still claimed (until 0.1.0's release deletes its row), and no entry.
      expect(await store.claim(key(ID.claimed), 60_000, randomUUID())).toBe(false);
      expect(await store.get(key(ID.claimed))).toBeUndefined();
      expect((await store.list()).map((entry) => entry.key)).not.toContain(key(ID.claimed));
      if (full) {
        expect(await store.expectations?.get('EFB.9000100')).toMatchObject({
          customData: '{"orderId":"order-7"}',
        });
      }
    },
  );

  test('two migrate() at once, from two instances, make the tables once and record each version once', async () => {
    const table = fresh();
    const reports = await Promise.all([d().store(table).migrateSchema(), d().store(table).migrateSchema()]);
    for (const report of reports) expect(report.to).toBe(LATEST);
    const versions = await d().rows(`SELECT version FROM ${d().quote(`${table}_schema`)} ORDER BY version`);
    expect(versions.map((v) => Number(v.version))).toEqual(ALL);
    for (const suffix of SUFFIXES) expect(await d().exists(`${table}${suffix}`)).toBe(true);
  });

  test('a database at a newer version than this ipn-kit is refused and left as it is', async () => {
    const dialect = d();
    const table = fresh();
    const store = dialect.store(table);
    await store.migrate();
    await dialect.run(
      `INSERT INTO ${dialect.quote(`${table}_schema`)} (version, name, applied_at) VALUES (${LATEST + 1}, 'from the future', ${dialect.at(0)})`,
    );
    await dialect.run(`DROP TABLE ${dialect.quote(`${table}_audit`)}`);
    for (const dryRun of [false, true]) {
      const refused = await store.migrateSchema({ dryRun }).catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(StoreError);
      expect(String((refused as Error).message)).toMatch(
        new RegExp(`schema version ${LATEST + 1}, newer than this ipn-kit's \\(${LATEST}\\)`),
      );
    }
    await expect(store.migrate()).rejects.toThrow(/never downgrades/);
    // Nothing was run: the table dropped stays dropped.
    expect(await dialect.exists(`${table}_audit`)).toBe(false);
  });

  test('tables dropped by hand under a recorded version are made again', async () => {
    const dialect = d();
    const table = fresh();
    const store = dialect.store(table);
    await store.migrate();
    await dialect.run(`DROP TABLE ${dialect.quote(`${table}_expected`)}`);
    const report = await store.migrateSchema();
    expect(report).toMatchObject({ from: LATEST, to: LATEST });
    expect(report.migrations.map((m) => m.version)).toEqual(ALL);
    expect(await dialect.exists(`${table}_expected`)).toBe(true);
  });

  test("a dry run says what would run and runs nothing; each version's SQL, run by a tool of your own, agrees", async () => {
    const dialect = d();
    const table = fresh();
    await dialect.run(fixture(fixtures[0]!.file, table));
    const store = dialect.store(table);
    const planned = await store.migrateSchema({ dryRun: true });
    expect(planned.from).toBe(0);
    expect(planned.to).toBe(0);
    expect(planned.migrations).toEqual(dialect.migrations(table));
    expect(await dialect.exists(`${table}_schema`)).toBe(false);

    // The partner's own tool: version 1 once, then (another day) the others, each in order.
    const [one, ...rest] = dialect.migrations(table);
    for (const statement of one!.statements) await dialect.run(statement);
    expect(await store.migrateSchema({ dryRun: true })).toMatchObject({ from: 1, migrations: rest });
    for (const migration of rest) for (const statement of migration.statements) await dialect.run(statement);
    expect(await store.migrateSchema()).toEqual({ from: LATEST, to: LATEST, migrations: [] });
  });
}

describeWithService('PostgreSQL', 'PostgreSQL: upgrade from 0.1.0', () => {
  const pool = new Pool({ connectionString: databaseUrl(), max: 4 });
  pool.on('error', () => {});
  const pools: Pool[] = [pool];
  const quote = (name: string) => `"${name}"`;
  const dialect: Dialect = {
    run: async (sql) => void (await pool.query(sql)),
    rows: async (sql) => (await pool.query(sql)).rows as Array<Record<string, unknown>>,
    store: (table) => {
      const own = new Pool({ connectionString: databaseUrl(), max: 2 });
      own.on('error', () => {});
      pools.push(own);
      return new PostgresStore({ pool: own, table });
    },
    at: (ms) => `now() + ${ms} * interval '1 millisecond'`,
    text: (value) => `'${value.replaceAll("'", "''")}'`,
    quote,
    migrations: (table) => postgresMigrations(table),
    exists: async (name) =>
      (await pool.query('SELECT to_regclass($1) IS NOT NULL AS present', [quote(name)])).rows[0].present ===
      true,
    drop: async (table) =>
      void (await pool.query(
        `DROP TABLE IF EXISTS ${DROPPED.map((suffix) => quote(`${table}${suffix}`)).join(', ')}`,
      )),
  };
  scenarios(() => dialect, `ipn_test_upg_${process.pid}`, [
    { file: 'postgres.sql', full: true },
    { file: 'postgres-first.sql', full: false },
  ]);
  // After the scenarios' own afterAll, which drops their tables through the pool.
  afterAll(async () => {
    await Promise.all(pools.map((made) => made.end()));
  });

  test('ipn-kit migrate prints the version before and after, and --dry-run the SQL it would run', async () => {
    const table = `ipn_test_upg_${process.pid}_cli`;
    const cli = async (args: string[]) => {
      const out: string[] = [];
      const err: string[] = [];
      const code = await runCli(['migrate', '--table', table, ...args], {
        stdout: (line) => out.push(line),
        stderr: (line) => err.push(line),
        env: { DATABASE_URL: databaseUrl() },
      });
      return { code, stdout: out.join('\n'), stderr: err.join('\n') };
    };
    try {
      await dialect.run(fixture('postgres.sql', table));
      const dry = await cli(['--dry-run']);
      expect(dry).toMatchObject({ code: 0, stderr: '' });
      expect(dry.stdout).toContain(`${table}: schema version 0 (none recorded`);
      expect(dry.stdout).toContain(`-- version 2: the expectations, lifecycle and audit tables`);
      expect(dry.stdout).toContain(postgresMigrations(table)[1]!.sql.trimEnd());
      expect(dry.stdout).toContain('dry run: nothing was run');
      expect(await dialect.exists(`${table}_schema`)).toBe(false);

      const ran = await cli([]);
      expect(ran).toMatchObject({ code: 0, stderr: '' });
      expect(ran.stdout.split('\n')).toEqual([
        `${table}: schema version 0 (none recorded: tables made before schema versions, or none yet)`,
        'ran version 1: the inbox and its index of due entries',
        'ran version 2: the expectations, lifecycle and audit tables',
        'ran version 3: the control table (a pause for every instance)',
        "ran version 4: the expectations' account (several API keys)",
        "ran version 5: the sweep's lock in the control table",
        'ran version 6: the delivered mark as a function (PostgreSQL)',
        'ran version 7: the claims table (at-most-once claims out of the inbox)',
        `${table}: schema version ${LATEST} (the latest)`,
      ]);
      expect((await cli([])).stdout.split('\n')).toEqual([
        `${table}: schema version ${LATEST} (the latest)`,
        `${table}: schema version ${LATEST} (the latest)`,
      ]);

      await dialect.run(
        `INSERT INTO "${table}_schema" (version, name) VALUES (${LATEST + 1}, 'from the future')`,
      );
      const refused = await cli([]);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toMatch(/newer than this ipn-kit's/);
      expect((await cli(['--table', 'x; DROP TABLE y'])).code).toBe(2);
      expect(await runCli(['migrate'], { stdout: () => {}, stderr: () => {}, env: {} })).toBe(2);
    } finally {
      await dialect.drop(table);
    }
  });
});

describeWithService('MariaDB', 'MySQL: upgrade from 0.1.0', () => {
  let pool: MysqlPool;
  const pools: MysqlPool[] = [];
  beforeAll(() => {
    pool = createPool({ uri: mysqlUrl(), connectionLimit: 4 });
    pools.push(pool);
  });
  const quote = (name: string) => `\`${name}\``;
  const dialect: Dialect = {
    run: async (sql) => {
      // One statement per query (the pool has no multipleStatements); the fixture's comment line dropped.
      const text = sql.replace(/^--.*$/gm, '');
      for (const statement of text.split(/;\s*$/m).filter((s) => s.trim() !== ''))
        await pool.query(statement);
    },
    rows: async (sql) => (await pool.query(sql))[0] as Array<Record<string, unknown>>,
    store: (table) => {
      const own = createPool({ uri: mysqlUrl(), connectionLimit: 2 });
      pools.push(own);
      return new MysqlStore({ pool: own, table });
    },
    at: (ms) => `(UTC_TIMESTAMP(3) + INTERVAL ${ms * 1000} MICROSECOND)`,
    text: (value) => `'${value.replaceAll('\\', '\\\\').replaceAll("'", "''")}'`,
    quote,
    migrations: (table) => mysqlMigrations(table),
    exists: async (name) =>
      (
        (
          await pool.query(
            'SELECT COUNT(*) AS n FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?',
            [name],
          )
        )[0] as Array<{ n: number }>
      )[0]!.n > 0,
    drop: async (table) =>
      void (await pool.query(
        `DROP TABLE IF EXISTS ${DROPPED.map((suffix) => quote(`${table}${suffix}`)).join(', ')}`,
      )),
  };
  scenarios(() => dialect, `ipn_test_upg_${process.pid}`, [{ file: 'mysql.sql', full: true }]);
  afterAll(async () => {
    await Promise.all(pools.map((made) => made.end()));
  });
});

describe('SQLite: upgrade from 0.1.0', () => {
  const folder = mkdtempSync(join(tmpdir(), 'ipn-kit-upgrade-'));
  const path = join(folder, 'ipn.db');
  const database = new Database(path);
  const opened: Database.Database[] = [database];
  const quote = (name: string) => `"${name}"`;
  const dialect: Dialect = {
    run: (sql) => Promise.resolve(void database.exec(sql)),
    rows: (sql) => Promise.resolve(database.prepare(sql).all() as Array<Record<string, unknown>>),
    store: (table) => {
      const own = new Database(path);
      opened.push(own);
      return new SqliteStore({ database: own, table });
    },
    at: (ms) => String(Date.now() + ms),
    text: (value) => `'${value.replaceAll("'", "''")}'`,
    quote,
    migrations: (table) => sqliteMigrations(table),
    exists: (name) =>
      Promise.resolve(
        database.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?").all(name).length >
          0,
      ),
    drop: (table) => {
      for (const suffix of DROPPED) database.exec(`DROP TABLE IF EXISTS "${table}${suffix}"`);
      return Promise.resolve();
    },
  };
  scenarios(() => dialect, `ipn_test_upg_${process.pid}`, [{ file: 'sqlite.sql', full: true }]);

  test('ipn-kit migrate --sqlite FILE migrates the file; a file that is not there is refused', async () => {
    const file = join(folder, 'cli.db');
    const made = new Database(file);
    made.exec(fixture('sqlite.sql', 'ipn_inbox'));
    made.close();
    const out: string[] = [];
    const err: string[] = [];
    const io = {
      stdout: (line: string) => out.push(line),
      stderr: (line: string) => err.push(line),
      env: {},
    };
    expect(await runCli(['migrate', '--sqlite', file], io)).toBe(0);
    expect(err).toEqual([]);
    expect(out.at(0)).toMatch(/^ipn_inbox: schema version 0 /);
    expect(out.at(-1)).toBe(`ipn_inbox: schema version ${LATEST} (the latest)`);
    const check = new Database(file);
    opened.push(check);
    expect(check.prepare('SELECT version FROM ipn_inbox_schema ORDER BY version').all()).toEqual(
      ALL.map((version) => ({ version })),
    );
    expect(await runCli(['migrate', '--sqlite', join(folder, 'typo.db')], io)).toBe(2);
    expect(err.at(-1)).toMatch(/typo\.db does not exist/);
  });
  afterAll(() => {
    for (const made of opened) made.close();
    rmSync(folder, { recursive: true, force: true });
  });
});
