import {
  distinctName,
  latestSql,
  olderClaim,
  schemaMigrations,
  type Migration,
  type MigrationStep,
  type SchemaDialect,
  type SchemaMigration,
  numberedMigrations,
  statement,
} from '../schema-migrations.js';
import { postgresAuditSql } from './postgres-audit.js';
import { postgresExpectationsSql } from './postgres-expectations.js';
import {
  besideInbox,
  claimsTable,
  EMPTY_RECORD,
  markFunction,
  markFunctionSql,
  olderClaimFunction,
  statesTable,
  tableNames,
} from './postgres-sql.js';

/** The first key of the migration's advisory lock: ipn-kit's own, so it does not meet an app's locks. */
const MIGRATE_LOCK = 0x69706e6b; // 'ipnk'

/**
 * A nullable column added to a table of the set, in a version of its own: `ALTER TABLE ... ADD COLUMN IF NOT
 * EXISTS`. `column` and `type` are ipn-kit's own text (a name, a PostgreSQL type), never a user's.
 */
export function addColumn(quotedTable: string, column: string, type: string): MigrationStep {
  return { sql: `ALTER TABLE ${quotedTable} ADD COLUMN IF NOT EXISTS ${column} ${type}` };
}

/**
 * The CHECK that keeps the sweep's lock out of `<table>_expected` once it is in `<table>_control` (schema
 * version 5). An instance of an older ipn-kit, still running in a rolling deploy, takes its lock there as a
 * row `transaction_id = ''`: the CHECK fails it, so its sweep does not run (an `error` event) rather than run
 * beside the new instances' one.
 */
const SWEEP_LOCK_CHECK = 'ipn_kit_no_sweep_lock';

/**
 * Version 5: the sweep's lock moves from a row of `<table>_expected` (`transaction_id = ''`, its owner in
 * `custom_data`, its end in `due_at`) to the row `sweep` of `<table>_control` (owner in `value`, end in the
 * new `until_ms`), and a CHECK (`NOT VALID`: the rows there are not read again) refuses the old row from now
 * on. Each statement can run twice: a lock already moved is kept, and the CHECK is added once.
 */
function sweepLockSteps(expected: string, control: string): MigrationStep[] {
  const regclass = expected.replaceAll("'", "''");
  return [
    addColumn(control, 'until_ms', 'bigint'),
    statement(`INSERT INTO ${control} (name, value, until_ms)
SELECT 'sweep', coalesce(custom_data, ''), due_at FROM ${expected} WHERE transaction_id = ''
ON CONFLICT (name) DO NOTHING`),
    statement(`DELETE FROM ${expected} WHERE transaction_id = ''`),
    statement(`DO $$ BEGIN
  IF NOT EXISTS (
    SELECT 1 FROM pg_constraint WHERE conrelid = to_regclass('${regclass}') AND conname = '${SWEEP_LOCK_CHECK}'
  ) THEN
    ALTER TABLE ${expected} ADD CONSTRAINT ${SWEEP_LOCK_CHECK} CHECK (transaction_id <> '') NOT VALID;
  END IF;
END $$`),
  ];
}

/**
 * The CHECK that keeps claim markers out of the inbox once claims are in `<table>_claims` (schema version
 * 7). An instance of an older ipn-kit, still running in a rolling deploy, claims a key as a row `delivered`
 * with the record `{}` and its token as `lease_id`, which no other write makes (a delivered mark clears the
 * lease): the CHECK fails its claim (a store failure: it answers 503, and the service resends to another
 * instance) rather than take a key that a newer instance claimed in `<table>_claims`, which it does not
 * look at (both would deliver). A receive of an empty record (the store's API allows one; the router never
 * makes one) is not such a row. The markers there before the CHECK stay, `NOT VALID` (see claimsSteps).
 */
const CLAIM_MARKER_CHECK = 'ipn_kit_no_claim_marker';

/** The trigger of version 7 that lets an older ipn-kit ask again about its claim (see claimsSteps). */
const OLDER_CLAIM_TRIGGER = 'ipn_kit_older_claim';

/**
 * Version 7: at-most-once claims are rows of `<table>_claims` (key, token, when, until when) from now on,
 * and a CHECK refuses a new claim marker in the inbox (`NOT VALID`: the rows there are not read). The
 * markers older instances wrote stay where they are (see {@link olderClaim}): an older instance, still
 * running in a rolling deploy, releases a key by deleting its row of the inbox, which must then be
 * there; each holds its key until then (or until purged), as before. The CHECK holds the inbox's lock
 * until the version commits: an older instance's claim meanwhile waits for it, then fails (503, resent),
 * and its release waits, then deletes its marker. An older instance asks again about a claim whose answer
 * was lost, with the same statement and token, which the CHECK would refuse too (it comes before the key's
 * conflict): the trigger `ipn_kit_older_claim` skips an older claim of a key the inbox has a row of, as
 * its `ON CONFLICT (key) DO NOTHING` would, so that it finds its own marker by its token (and another's
 * claim finds the key taken); an older claim of a key with no row goes on to the CHECK. Each statement can
 * run twice.
 */
function claimsSteps(table: string): MigrationStep[] {
  const { quoted, name } = tableNames(table);
  const claims = claimsTable(table);
  const regclass = quoted.replaceAll("'", "''");
  const index = `"${distinctName(name.split('.').pop()!, '_claims_at_idx', 63)}"`;
  return [
    statement(`CREATE TABLE IF NOT EXISTS ${claims} (
  key text PRIMARY KEY,
  token text NOT NULL,
  claimed_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL
)`),
    statement(`CREATE INDEX IF NOT EXISTS ${index} ON ${claims} (claimed_at)`),
    statement(`DO $$ BEGIN
  IF NOT EXISTS (
    SELECT 1 FROM pg_constraint WHERE conrelid = to_regclass('${regclass}') AND conname = '${CLAIM_MARKER_CHECK}'
  ) THEN
    ALTER TABLE ${quoted} ADD CONSTRAINT ${CLAIM_MARKER_CHECK}
      CHECK (NOT ${olderClaim(EMPTY_RECORD)}) NOT VALID;
  END IF;
END $$`),
    // The key's row looked up in the table the trigger fires on (by its schema and name, whatever the
    // session's search_path). Only an older ipn-kit's claim calls it: the WHEN passes over every other row.
    // No `$1` in it: an ORM's raw query (Knex) reads one as a placeholder; %L quotes the key.
    // Locked (FOR KEY SHARE), not read in a snapshot: a row a release is deleting is waited for, as the
    // claim's ON CONFLICT would wait, then not found (the claim goes on to the CHECK: 503, resent), never
    // seen still there (a duplicate, answered 200, of a key nobody holds once the release commits). A role
    // without UPDATE on the inbox may not lock: it reads, as before.
    statement(`CREATE OR REPLACE FUNCTION ${olderClaimFunction(table)}() RETURNS trigger
  LANGUAGE plpgsql AS $ipn_kit$
DECLARE
  held boolean;
BEGIN
  BEGIN
    EXECUTE format('SELECT true FROM %I.%I WHERE key = %L FOR KEY SHARE', TG_TABLE_SCHEMA, TG_TABLE_NAME, NEW.key)
      INTO held;
  EXCEPTION WHEN insufficient_privilege THEN
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.%I WHERE key = %L)', TG_TABLE_SCHEMA, TG_TABLE_NAME, NEW.key)
      INTO held;
  END;
  IF held THEN
    RETURN NULL;
  END IF;
  RETURN NEW;
END $ipn_kit$`),
    statement(`DO $$ BEGIN
  IF NOT EXISTS (
    SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass('${regclass}') AND tgname = '${OLDER_CLAIM_TRIGGER}'
  ) THEN
    CREATE TRIGGER ${OLDER_CLAIM_TRIGGER} BEFORE INSERT ON ${quoted} FOR EACH ROW
      WHEN (NEW.status = 'delivered' AND NEW.lease_id IS NOT NULL AND NEW.record = '{}'::jsonb)
      EXECUTE PROCEDURE ${olderClaimFunction(table)}();
  END IF;
END $$`),
  ];
}

/**
 * Every version of the PostgreSQL schema of the table set of inbox `table`, in order. A released version
 * never changes; a change of the schema is one more line at the end (`addColumn(...)` in a version of its
 * own), with the same number in every dialect, and its name in `VERSION_NAMES` (`numberedMigrations`).
 */
export function postgresMigrationList(table: string): readonly Migration[] {
  const { quoted, dueIndex } = tableNames(table);
  const expected = besideInbox(table, '_expected');
  const states = statesTable(quoted);
  const audit = besideInbox(table, '_audit');
  const control = besideInbox(table, '_control');
  return numberedMigrations([
    // version 1
    {
      tables: [quoted],
      steps: [
        statement(`CREATE TABLE IF NOT EXISTS ${quoted} (
  key text PRIMARY KEY,
  transaction_id text NOT NULL,
  state text NOT NULL,
  record jsonb NOT NULL,
  status text NOT NULL CHECK (status IN ('received', 'delivered', 'failed', 'dead')),
  attempts integer NOT NULL DEFAULT 0,
  last_error text,
  received_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  next_attempt_at timestamptz NOT NULL DEFAULT now(),
  delivered_at timestamptz,
  lease_id text,
  lease_until timestamptz,
  CHECK (key = transaction_id || ':' || state)
)`),
        statement(`CREATE INDEX IF NOT EXISTS ${dueIndex} ON ${quoted} (status, next_attempt_at)`),
      ],
    },
    // version 2
    {
      tables: [expected, states, audit],
      steps: [
        statement(postgresExpectationsSql(table)),
        statement(`CREATE TABLE IF NOT EXISTS ${states} (
  transaction_id text PRIMARY KEY,
  state text NOT NULL,
  decided_at timestamptz NOT NULL DEFAULT now()
)`),
        statement(postgresAuditSql(table)),
      ],
    },
    // version 3
    {
      tables: [control],
      steps: [
        statement(`CREATE TABLE IF NOT EXISTS ${control} (
  name text PRIMARY KEY,
  value text NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
)`),
      ],
    },
    // version 4
    { tables: [], steps: [addColumn(expected, 'account', 'text')] },
    // version 5
    { tables: [], steps: sweepLockSteps(expected, control) },
    // version 6
    {
      // A function, not a table: checked by its signature (see `exists` below), so that a database whose
      // function was dropped has it made again by migrate().
      tables: [`${markFunction(table)}(text, text)`],
      steps: [statement(markFunctionSql(table))],
    },
    // version 7
    {
      // The function by its signature, as version 6's: a database without it (dropped, or at a version 7
      // of an unreleased ipn-kit, which moved the older claims instead) has the versions run again.
      tables: [claimsTable(table), `${olderClaimFunction(table)}()`],
      steps: claimsSteps(table),
    },
  ]);
}

/** The quoted control table beside inbox `table`: `<table>_control` (the rows `paused` and `sweep`). */
export const postgresControlTable = (table: string): string => besideInbox(table, '_control');

/** The version table beside inbox `table`: `<table>_schema`, one row per version run. */
function recordSql(table: string, migration: Migration): string[] {
  const versions = besideInbox(table, '_schema');
  return [
    `CREATE TABLE IF NOT EXISTS ${versions} (
  version integer PRIMARY KEY,
  name text NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
)`,
    `INSERT INTO ${versions} (version, name) VALUES (${migration.version}, '${migration.name.replaceAll("'", "''")}') ON CONFLICT (version) DO NOTHING`,
  ];
}

/**
 * Each version of the PostgreSQL schema of the table set of inbox `table` (the inbox, `<table>_expected`,
 * `<table>_states`, `<table>_audit`, `<table>_control`, `<table>_claims`), as SQL for a migration tool of your own: run those above the version
 * your database is at (`SELECT max(version) FROM <table>_schema`; none: 0), each once, in order.
 * `PostgresStore.migrate()` and `ipn-kit migrate` run the same statements.
 *
 * @param table `name` or `schema.name`. @default 'ipn_inbox'
 * @throws TypeError when `table` is not such a name.
 * @example
 * import { postgresMigrations } from 'ipn-kit/postgres';
 * for (const { version, sql } of postgresMigrations('ipn_inbox')) {
 *   if (version > current) await db.query(sql);
 * }
 */
export function postgresMigrations(table = 'ipn_inbox'): SchemaMigration[] {
  tableNames(table, 'postgresMigrations');
  return schemaMigrations(postgresMigrationList(table), (migration) => recordSql(table, migration));
}

/**
 * The SQL that creates the latest schema of the table set of inbox `table`: the inbox and its index, the
 * expectations (`<table>_expected`), lifecycle (`<table>_states`), audit (`<table>_audit`), control
 * (`<table>_control`) and claims (`<table>_claims`: at-most-once claims, apart from the inbox) tables, and
 * the version table (`<table>_schema`) with every version recorded: the statements of every
 * {@link postgresMigrations} version, in order. Idempotent (`IF NOT EXISTS` throughout): run on a database of
 * an earlier version, it brings it to the latest, rows kept.
 *
 * The key `transaction_id:state` is the primary key: it is what makes a receive atomic across instances (a
 * claim's is the primary key of `<table>_claims`; each checks the other table by its key). A `CHECK` keeps it equal to `transaction_id || ':' || state`, so `(transaction_id, state)` is
 * unique too, without a second unique index to maintain on every insert.
 *
 * @param table `name` or `schema.name`. @default 'ipn_inbox'
 * @throws TypeError when `table` is not such a name.
 * @example
 * // In a migration of your own (node-pg-migrate, knex, a .sql file):
 * import { postgresSchemaSql } from 'ipn-kit/postgres';
 * await db.query(postgresSchemaSql('ipn_inbox'));
 */
export function postgresSchemaSql(table = 'ipn_inbox'): string {
  tableNames(table, 'postgresSchemaSql');
  return latestSql(postgresMigrations(table));
}

/**
 * The statements that take the migration's advisory lock of the quoted inbox table `quoted`, keyed by the
 * table as PostgreSQL resolves it: `"schema"."name"`, an unqualified name in the schema it is created in
 * (`current_schema()`, read as the migration runs), so that `inbox` and `public.inbox` take turns. The lock
 * of the unqualified name (`"name"`) is taken first, whichever the spelling: the one of ipn-kit's versions
 * before this for that spelling, so an instance still on one takes turns with both spellings; always in
 * that order, so two never deadlock.
 */
function migrationLock(quoted: string): string {
  const take = (key: string): string => `SELECT pg_advisory_xact_lock(${MIGRATE_LOCK}, hashtext(${key}))`;
  const literal = (text: string): string => `'${text.replaceAll("'", "''")}'`;
  const bare = quoted.split('.').pop()!;
  const resolved = quoted.includes('.')
    ? literal(quoted)
    : `'"' || replace(coalesce(current_schema(), ''), '"', '""') || '".' || ${literal(bare)}`;
  return `${take(literal(bare))};\n${take(resolved)}`;
}

/** What the PostgreSQL dialect runs its statements through: the store's pool, or its ORM as one. */
interface Query {
  (text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}

/**
 * The PostgreSQL part of `migrate()`. Each version runs as one multi-statement query behind a
 * transaction-scoped advisory lock: PostgreSQL runs it as one implicit transaction (a failure rolls it back
 * whole, and leaves a pooled connection clean, with no BEGIN/COMMIT to pair, through a transaction-mode
 * pooler too), and two processes migrating at once take turns (a bare `CREATE TABLE IF NOT EXISTS` can
 * fail with a unique violation when two run concurrently). The one that comes second finds the version's
 * tables made, and its idempotent statements change nothing. The lock is the one of ipn-kit's versions
 * before schema versions, so an instance still on one takes turns with these too.
 */
export function postgresSchemaDialect(table: string, query: Query): SchemaDialect {
  const { quoted } = tableNames(table);
  const versions = besideInbox(table, '_schema');
  const lock = migrationLock(quoted);
  // A table by its name; a function by its signature (`name(text, text)`).
  const present = (tables: readonly string[]): string =>
    tables
      .map(
        (t) =>
          `${t.endsWith(')') ? 'to_regprocedure' : 'to_regclass'}('${t.replaceAll("'", "''")}') IS NOT NULL`,
      )
      .join(' AND ');
  const session = {
    async version(): Promise<number> {
      if (!(await session.exists([versions]))) return 0;
      const { rows } = await query(`SELECT coalesce(max(version), 0)::int AS version FROM ${versions}`);
      return Number((rows[0] as { version?: unknown } | undefined)?.version ?? 0);
    },
    async exists(tables: readonly string[]): Promise<boolean> {
      if (tables.length === 0) return true;
      const { rows } = await query(`SELECT ${present(tables)} AS present`);
      return (rows[0] as { present?: unknown } | undefined)?.present === true;
    },
    async apply(steps: readonly MigrationStep[]): Promise<void> {
      await query([lock, ...steps.map((step) => step.sql)].join(';\n'));
    },
  };
  return {
    owner: 'PostgresStore',
    table,
    migrations: postgresMigrationList(table),
    record: (migration) => recordSql(table, migration),
    locked: (work) => work(session),
  };
}
