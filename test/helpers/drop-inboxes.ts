/**
 * Cleanup for tests that make inbox tables of their own in the shared database `test`: drops each inbox
 * and everything a store's migrate() makes beside it (`<table>_expected`, `_states`, `_audit`, `_control`,
 * `_schema`, and whatever a later schema version adds: every table whose name starts with `<table>_`;
 * PostgreSQL's `<table>_mark` function too). A list of side tables written out by hand fell behind the
 * schema's versions, and each run left hundreds of tables behind. The names are this run's own (a pid and
 * a random part), so nothing else starts with them. A name may be `schema.table` on PostgreSQL.
 */

/**
 * The timeout of a cleanup hook that drops inboxes: each is a set of tables (and a function on PostgreSQL),
 * and a file's many sets take longer than jest's default 5 s under load (seen: MariaDB's afterAll).
 */
export const CLEANUP_TIMEOUT_MS = 60_000;

/** A PostgreSQL pool or client: what `pg` hands out. */
interface PgQueryable {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}

/** A `mysql2/promise` pool or connection. */
interface MysqlQueryable {
  query(sql: string, values?: unknown[]): Promise<unknown>;
}

/** Drops the PostgreSQL inboxes `tables` (plain names: in the connection's current schema) and their sets. */
export async function dropPostgresInboxes(db: PgQueryable, tables: readonly string[]): Promise<void> {
  if (tables.length === 0) return;
  const schemas = tables.map((table) => (table.includes('.') ? table.split('.')[0]! : null));
  const names = tables.map((table) => table.split('.').pop()!);
  const owned = `unnest($1::text[], $2::text[]) AS t(schema, name)
      WHERE n.nspname = coalesce(t.schema, current_schema())`;
  const { rows } = await db.query(
    `SELECT format('%I.%I', n.nspname, c.relname) AS name FROM pg_class c
      JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE c.relkind IN ('r', 'p') AND EXISTS (SELECT FROM ${owned}
        AND (c.relname = t.name OR starts_with(c.relname, t.name || '_')))
    UNION ALL SELECT format('FUNCTION %s', p.oid::regprocedure) FROM pg_proc p
      JOIN pg_namespace n ON n.oid = p.pronamespace
      WHERE EXISTS (SELECT FROM ${owned} AND starts_with(p.proname, t.name || '_'))`,
    [schemas, names],
  );
  const found = (rows as Array<{ name: string }>).map((row) => row.name);
  const relations = found.filter((name) => !name.startsWith('FUNCTION '));
  const functions = found.filter((name) => name.startsWith('FUNCTION ')).map((name) => name.slice(9));
  if (relations.length > 0) await db.query(`DROP TABLE IF EXISTS ${relations.join(', ')} CASCADE`);
  if (functions.length > 0) await db.query(`DROP FUNCTION IF EXISTS ${functions.join(', ')} CASCADE`);
}

/** Drops the MySQL / MariaDB inboxes `tables` (in the connection's database) and their sets. */
export async function dropMysqlInboxes(db: MysqlQueryable, tables: readonly string[]): Promise<void> {
  if (tables.length === 0) return;
  const like = (table: string): string => `${table.replace(/[\\_%]/g, (c) => `\\${c}`)}\\_%`;
  const [rows] = (await db.query(
    `SELECT table_name AS name FROM information_schema.tables WHERE table_schema = DATABASE()
      AND (${tables.map(() => '(table_name = ? OR table_name LIKE ?)').join(' OR ')})`,
    tables.flatMap((table) => [table, like(table)]),
  )) as [Array<{ name: string }>];
  if (rows.length === 0) return;
  await db.query(`DROP TABLE IF EXISTS ${rows.map((row) => `\`${row.name}\``).join(', ')}`);
}
