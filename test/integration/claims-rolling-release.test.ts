import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { createPool, type Pool as MysqlPool } from 'mysql2/promise';
import { Pool } from 'pg';
import { MysqlStore, mysqlMigrations } from '../../lib/mysql.js';
import { PostgresStore, postgresMigrations } from '../../lib/postgres.js';
import { SqliteStore, sqliteMigrations } from '../../lib/sqlite.js';
import type { Store } from '../../lib/index.js';
import { dropMysqlInboxes, dropPostgresInboxes } from '../helpers/drop-inboxes.js';
import { databaseUrl, describeWithService, mysqlUrl } from '../helpers/services.js';

/**
 * A rolling deploy across schema version 7, at most once. An instance of the older ipn-kit claims a key (a
 * marker row in the inbox) and verifies it in the background; a newer instance's migrate() moves the marker
 * to `<table>_claims`; the older instance is then stopped (the deploy), and its close() releases every key
 * still awaiting verification, "so that a resend or ipn.reconcile() can still deliver it" (verify-queue.ts),
 * with its own release statement: a DELETE of the inbox row, which is no longer there. The claim stays in
 * `<table>_claims`, so the service's resend, or a reconcile, is dropped as a duplicate by the newer
 * instances: the payment is never delivered. Its verification giving up (`verifyAttempts`) or a lifecycle
 * decision that failed (503, released for the resend) end the same way.
 *
 * KNOWN DEFECT (review5), left open: no trigger or rule can see a DELETE that matches no row, so a fix
 * means leaving (recent) markers in the inbox for the older instances' release to delete, or another
 * design of the move. `test.failing` until then: flip it to `test` with the fix.
 */

interface Dialect {
  store(table: string): Store & { migrate(): Promise<void> };
  migrateTo(table: string, version: number): Promise<void>;
  /** ipn-kit before version 7: its claim (a marker row in the inbox) and its release (a DELETE there). */
  oldClaim(table: string, key: string, token: string): Promise<void>;
  oldRelease(table: string, key: string): Promise<void>;
}

const newKey = (): string => `EFB.${randomUUID().slice(0, 12)}:SUCCESSFUL`;
const split = (key: string): [string, string] => [
  key.slice(0, key.lastIndexOf(':')),
  key.slice(key.lastIndexOf(':') + 1),
];

function scenario(d: () => Dialect, table: () => string): void {
  test.failing(
    "an older instance's release, after version 7 moved its claim, frees the key for the resend",
    async () => {
      const name = table();
      await d().migrateTo(name, 6);
      const key = newKey();
      await d().oldClaim(name, key, randomUUID());
      const store = d().store(name);
      await store.migrate(); // a newer instance starts
      await d().oldRelease(name, key); // the older one stops, releasing what it could not verify
      expect(await store.claim(key, 60_000, randomUUID())).toBe(true); // the resend is delivered
    },
  );
}

describeWithService('PostgreSQL', 'PostgreSQL: rolling deploy across version 7, an older release', () => {
  const pool = new Pool({ connectionString: databaseUrl(), max: 2 });
  const tables: string[] = [];
  afterAll(async () => {
    await dropPostgresInboxes(pool, tables);
    await pool.end();
  });
  const dialect: Dialect = {
    store: (table) => new PostgresStore({ pool, table }),
    async migrateTo(table, version) {
      for (const migration of postgresMigrations(table).slice(0, version)) await pool.query(migration.sql);
    },
    async oldClaim(table, key, token) {
      await pool.query(
        `INSERT INTO "${table}" (key, transaction_id, state, record, status, delivered_at, lease_id)
         VALUES ($1, $2, $3, '{}'::jsonb, 'delivered', now(), $4) ON CONFLICT (key) DO NOTHING`,
        [key, ...split(key), token],
      );
    },
    async oldRelease(table, key) {
      await pool.query(`DELETE FROM "${table}" WHERE key = $1 AND ($2::text IS NULL OR lease_id = $2)`, [
        key,
        null,
      ]);
    },
  };
  scenario(
    () => dialect,
    () => {
      tables.push(`ipn_test_rolling_${process.pid}_${randomUUID().slice(0, 6)}`);
      return tables.at(-1)!;
    },
  );
});

describeWithService('MariaDB', 'MySQL: rolling deploy across version 7, an older release', () => {
  let pool: MysqlPool;
  const tables: string[] = [];
  beforeAll(() => {
    pool = createPool({ uri: mysqlUrl(), connectionLimit: 2 });
  });
  afterAll(async () => {
    await dropMysqlInboxes(pool, tables);
    await pool.end();
  });
  const dialect: Dialect = {
    store: (table) => new MysqlStore({ pool, table }),
    async migrateTo(table, version) {
      for (const migration of mysqlMigrations(table).slice(0, version))
        for (const statement of migration.statements) await pool.query(statement);
    },
    async oldClaim(table, key, token) {
      const now = 'UTC_TIMESTAMP(3)';
      await pool.query(
        `INSERT INTO \`${table}\` (\`key\`, transaction_id, state, record, status, received_at, updated_at,
           next_attempt_at, delivered_at, lease_id)
         VALUES (?, ?, ?, '{}', 'delivered', ${now}, ${now}, ${now}, ${now}, ?)`,
        [key, ...split(key), token],
      );
    },
    async oldRelease(table, key) {
      await pool.query(`DELETE FROM \`${table}\` WHERE \`key\` = ? AND (? IS NULL OR lease_id = ?)`, [
        key,
        null,
        null,
      ]);
    },
  };
  scenario(
    () => dialect,
    () => {
      tables.push(`ipn_test_rolling_${process.pid}_${randomUUID().slice(0, 6)}`);
      return tables.at(-1)!;
    },
  );

  // MySQL's DDL is no transaction: an older instance's claim between the move and the CHECK fails that
  // ALTER (the version is not recorded), and the next migrate() moves it, still held by its token.
  test('an older claim between the move and the CHECK: the ALTER fails, the next migrate() moves it', async () => {
    const table = `ipn_test_rolling_${process.pid}_${randomUUID().slice(0, 6)}`;
    tables.push(table);
    await dialect.migrateTo(table, 6);
    const [moved, between, after] = [newKey(), newKey(), newKey()];
    await dialect.oldClaim(table, moved, 'first');
    const steps = mysqlMigrations(table)[6]!.statements;
    const check = steps.findIndex((statement) => statement.includes('ADD CONSTRAINT'));
    for (const statement of steps.slice(0, check)) await pool.query(statement);
    await dialect.oldClaim(table, between, 'between');
    await expect(pool.query(steps[check]!)).rejects.toThrow(/no_claim_marker/);
    const store = dialect.store(table);
    await store.migrate();
    expect(await store.claim(between, 60_000, randomUUID())).toBe(false);
    expect(await store.claim(between, 60_000, 'between')).toBe(true);
    expect(await store.claim(moved, 60_000, 'first')).toBe(true);
    await expect(dialect.oldClaim(table, after, 'after')).rejects.toThrow(/no_claim_marker/);
  });
});

describe('SQLite: rolling deploy across version 7, an older release', () => {
  const folder = mkdtempSync(join(tmpdir(), 'ipn-kit-rolling-'));
  const database = new Database(join(folder, 'ipn.db'));
  afterAll(() => {
    database.close();
    rmSync(folder, { recursive: true, force: true });
  });
  const dialect: Dialect = {
    store: (table) => new SqliteStore({ database, table }),
    migrateTo(table, version) {
      for (const migration of sqliteMigrations(table).slice(0, version)) database.exec(migration.sql);
      return Promise.resolve();
    },
    oldClaim(table, key, token) {
      const now = Date.now();
      database
        .prepare(
          `INSERT INTO "${table}" (key, transaction_id, state, record, status, received_at, updated_at,
             next_attempt_at, delivered_at, lease_id)
           VALUES (?, ?, ?, '{}', 'delivered', ?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING`,
        )
        .run(key, ...split(key), now, now, now, now, token);
      return Promise.resolve();
    },
    oldRelease(table, key) {
      database
        .prepare(`DELETE FROM "${table}" WHERE key = ? AND (? IS NULL OR lease_id = ?)`)
        .run(key, null, null);
      return Promise.resolve();
    },
  };
  scenario(
    () => dialect,
    () => `ipn_test_rolling_${randomUUID().slice(0, 6)}`,
  );
});
