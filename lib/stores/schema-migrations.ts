import { IpnKitError, messageOf, StoreError } from '../shared/errors.js';

/**
 * An older ipn-kit's claim in the inbox: before schema version 7 (ipn-kit 0.1.0, on PostgreSQL), an
 * at-most-once claim was a row of the inbox, `delivered`, with the record `{}` and its token as `lease_id`,
 * which no write of this ipn-kit makes (its delivered marks clear the lease). Version 7 leaves such rows where
 * they are, for the older instance that made one to delete on release (its release is a `DELETE` of the
 * key's row of the inbox: a row moved elsewhere would stay, and its key stay claimed for good, the
 * service's resend dropped as a duplicate). Until then the row holds its key, as it did before: a claim
 * finds the key's row in the inbox, a receive its primary key (a duplicate); `release(key)` and
 * `purge(before)` delete it, as they delete delivered rows. It holds no notification: every read, count
 * and replay of entries passes over it (`AND NOT ...`). `emptyRecord` is the dialect's test that the
 * row's record is `{}`, in SQL.
 */
export function olderClaim(emptyRecord: string): string {
  return `(${emptyRecord} AND status = 'delivered' AND lease_id IS NOT NULL)`;
}

/**
 * One statement of a migration. `done`, where the dialect has no `IF NOT EXISTS` for the statement (MySQL's
 * and SQLite's `ADD COLUMN`), is a query that returns a row once the statement has run: `migrate()` skips
 * the statement then, so that every step can run twice (two processes at once, a database whose tables
 * were made before versions) and change nothing the second time.
 */
export interface MigrationStep {
  readonly sql: string;
  readonly done?: string;
}

/**
 * One version of a dialect's schema: what it adds to the version before it. A released version never
 * changes (a partner's database is at it): a change of the schema is a new version at the end of the list.
 */
export interface Migration {
  readonly version: number;
  /** What it adds, for people: kept in the version table beside the number. */
  readonly name: string;
  /** The tables it creates, quoted: `migrate()` checks that they are there once the database is at it. */
  readonly tables: readonly string[];
  readonly steps: readonly MigrationStep[];
}

/**
 * One version of the schema of a table set, as SQL to run in a migration tool of your own (node-pg-migrate,
 * knex, Prisma Migrate, a `.sql` file): each version once, in order, those above the version your database
 * is at. `statements` one by one (MySQL runs one per query), or `sql`, all of them as one text. The last
 * statements record the version in the table `<table>_schema` (made if missing), where `store.migrate()`
 * and `ipn-kit migrate` read it: the two ways agree on where a database is.
 */
export interface SchemaMigration {
  /** 1, 2, ...: the same number means the same tables and columns in every dialect. */
  readonly version: number;
  /** What it adds. */
  readonly name: string;
  /** Its statements, each without a final `;`. */
  readonly statements: readonly string[];
  /** Its statements as one text, each ending with `;` and a new line. */
  readonly sql: string;
}

/** What `store.migrate()` did (or, with `dryRun`, would do). */
export interface MigrationReport {
  /** The version the database was at: 0 for one made before versions (ipn-kit 0.1.0) or a new one. */
  readonly from: number;
  /** The version it is at now (with `dryRun`, still `from`). */
  readonly to: number;
  /** The versions run (with `dryRun`: that would run), in order. */
  readonly migrations: readonly SchemaMigration[];
}

/** Options of `store.migrate()`. */
export interface MigrateOptions {
  /** Reads the database's version and says what would run, running nothing. @default false */
  readonly dryRun?: boolean;
}

/** What a dialect's migration runs through, while the dialect's lock (if it takes one for all) is held. */
export interface SchemaSession {
  /** The highest version recorded in `<table>_schema`; 0 when the table is not there. */
  version(): Promise<number>;
  /** Whether every table of `tables` is there. */
  exists(tables: readonly string[]): Promise<boolean>;
  /**
   * Runs `steps` (a migration's, then the statements that record it), in one transaction where the
   * dialect allows, skipping a step whose `done` query returns a row; behind the dialect's lock.
   */
  apply(steps: readonly MigrationStep[]): Promise<void>;
}

/** A dialect's part of migrating: its SQL, and how it locks and runs it. */
export interface SchemaDialect {
  /** For messages: `PostgresStore`. */
  readonly owner: string;
  /** The inbox table, as given. */
  readonly table: string;
  /** Every version, in order from 1. */
  readonly migrations: readonly Migration[];
  /** The statements, run after a migration's own, that record `migration` in `<table>_schema`. */
  record(migration: Migration): readonly string[];
  /** Runs `work` with a session, under the lock that makes two processes take turns. */
  locked<T>(work: (session: SchemaSession) => Promise<T>, options: { dryRun: boolean }): Promise<T>;
}

/** `migration` as SQL for a migration tool: its steps, then the statements that record it. */
export function schemaMigration(
  dialect: Pick<SchemaDialect, 'record'>,
  migration: Migration,
): SchemaMigration {
  const statements = [...migration.steps.map((step) => step.sql), ...dialect.record(migration)];
  return {
    version: migration.version,
    name: migration.name,
    statements,
    sql: statements.map((statement) => `${statement};\n`).join(''),
  };
}

/** Every migration of `migrations` as SQL for a migration tool, each followed by what `record` adds. */
export function schemaMigrations(
  migrations: readonly Migration[],
  record: (migration: Migration) => readonly string[],
): SchemaMigration[] {
  return migrations.map((migration) => schemaMigration({ record }, migration));
}

/** Every statement of `migrations` as one text: what brings a database of any version to the latest. */
export function latestSql(migrations: readonly SchemaMigration[]): string {
  return migrations.map((migration) => migration.sql).join('');
}

/**
 * Each schema version's name, in order: a version means the same in every dialect (one that is another
 * dialect's alone keeps its number there, with no tables and no steps: {@link NOT_HERE}).
 */
const VERSION_NAMES = [
  'the inbox and its index of due entries',
  'the expectations, lifecycle and audit tables',
  'the control table (a pause for every instance)',
  "the expectations' account (several API keys)",
  "the sweep's lock in the control table",
  'the delivered mark as a function (PostgreSQL)',
  'the claims table (at-most-once claims out of the inbox)',
];

/** A version as a dialect lists it: its tables and steps (see {@link Migration}). */
export type VersionParts = Pick<Migration, 'tables' | 'steps'>;

/** A version of another dialect alone (version 6 is PostgreSQL's): its number kept, nothing to run. */
export const NOT_HERE: VersionParts = { tables: [], steps: [] };

/**
 * A dialect's versions, numbered 1, 2, 3, ... in the order listed and named (`VERSION_NAMES`): a slip in a
 * dialect's list (a version more or fewer) fails at once.
 */
export function numberedMigrations(versions: readonly VersionParts[]): readonly Migration[] {
  if (versions.length !== VERSION_NAMES.length) {
    const message = `ipn-kit: ${versions.length} schema versions listed, of ${VERSION_NAMES.length}`;
    throw new IpnKitError('IPN_INTERNAL', message);
  }
  return versions.map(({ tables, steps }, index) => ({
    version: index + 1,
    name: VERSION_NAMES[index]!,
    tables,
    steps,
  }));
}

/** One statement of a text that holds one (or ends with `;`). */
export const statement = (sql: string): MigrationStep => ({ sql: sql.trim().replace(/;$/, '') });

/**
 * `migrate()`'s run ({@link runMigrations}), its failure worded: a `StoreError` as it is, anything else as
 * what could not be made, the driver's message, then `hint` (what the database user needs, where the SQL is).
 */
export async function migrateWorded(
  dialect: SchemaDialect,
  options: MigrateOptions | undefined,
  hint = '',
): Promise<MigrationReport> {
  try {
    return await runMigrations(dialect, options);
  } catch (error) {
    if (error instanceof StoreError) throw error;
    const { owner, table } = dialect;
    throw new StoreError(
      `${owner}.migrate: could not create the table ${table}: ${messageOf(error)}${hint}`,
      {
        cause: error,
      },
    );
  }
}

/**
 * Brings the table set of `dialect` to its latest version: reads the version the database is at, refuses a
 * newer one (ipn-kit never downgrades), and runs each version above it in order. A database made before
 * versions (ipn-kit 0.1.0, or `postgresSchemaSql()` of then) is at 0: every version runs, and each is
 * idempotent, so the tables it already has are kept as they are, rows and all. So is a database whose
 * recorded version's tables are not all there (dropped by hand): its versions run again.
 * @throws StoreError when the database is at a newer version than this ipn-kit's, or a statement fails.
 */
export async function runMigrations(
  dialect: SchemaDialect,
  options: MigrateOptions = {},
): Promise<MigrationReport> {
  const dryRun = options.dryRun === true;
  const { migrations } = dialect;
  const latest = migrations.length;
  return dialect.locked(
    async (session) => {
      const from = await session.version();
      if (from > latest) {
        throw new StoreError(
          `${dialect.owner}.migrate: the tables of ${dialect.table} are at schema version ${from}, newer than ` +
            `this ipn-kit's (${latest}): a newer ipn-kit migrated them. Nothing was changed (ipn-kit never ` +
            'downgrades a schema): run the newer ipn-kit, or upgrade this one',
        );
      }
      const tables = migrations.filter((m) => m.version <= from).flatMap((m) => m.tables);
      const start = (await session.exists(tables)) ? from : 0;
      const pending = migrations.filter((m) => m.version > start);
      if (!dryRun) {
        for (const migration of pending) {
          await session.apply([...migration.steps, ...dialect.record(migration).map((sql) => ({ sql }))]);
        }
      }
      return {
        from,
        to: dryRun ? from : Math.max(from, latest),
        migrations: pending.map((migration) => schemaMigration(dialect, migration)),
      };
    },
    { dryRun },
  );
}

/**
 * A name cut to `limit` bytes that stays distinct: `<name><suffix>` as it is when it fits, else the name cut
 * and followed by 8 hex digits of a hash of the whole (FNV-1a) before `suffix`. For a name of ipn-kit's own
 * that did not exist before it was cut this way (a function, a constraint), so two inboxes whose long names
 * share their start do not share it. `name` is an ASCII identifier (checked by the store).
 */
export function distinctName(name: string, suffix: string, limit: number): string {
  if (name.length + suffix.length <= limit) return `${name}${suffix}`;
  let hash = 0x811c9dc5;
  for (let i = 0; i < name.length; i += 1) hash = Math.imul(hash ^ name.charCodeAt(i), 0x01000193);
  const tag = `_${(hash >>> 0).toString(16).padStart(8, '0')}${suffix}`;
  return `${name.slice(0, limit - tag.length)}${tag}`;
}

/**
 * Checks `table` (`name` or `<schema>.name`, each part of letters, digits and underscores, not starting with
 * a digit, at most `most` characters: the database's limit) and splits it at the `.`. `owner` names the
 * store in the message.
 * @throws TypeError when `table` is not such a name.
 */
export function tableParts(owner: string, table: unknown, most: number): string[] {
  const parts = typeof table === 'string' ? table.split('.') : [];
  const identifier = new RegExp(`^[A-Za-z_][A-Za-z0-9_]{0,${most - 1}}$`);
  if (parts.length < 1 || parts.length > 2 || !parts.every((part) => identifier.test(part))) {
    throw new TypeError(
      `${owner}: table must be a name such as 'ipn_inbox' or 'app.ipn_inbox' (letters, digits and ` +
        `underscores, at most ${most} per part, not starting with a digit), got ${JSON.stringify(table) ?? String(table)}`,
    );
  }
  return parts;
}
