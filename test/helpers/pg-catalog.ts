import type { Pool, PoolClient } from 'pg';

/** A column as PostgreSQL's catalog describes it. */
export interface CatalogColumn {
  name: string;
  /** `format_type`: `text`, `timestamp with time zone`, `integer`, ... */
  type: string;
  notNull: boolean;
  /** The default's expression as PostgreSQL prints it (`now()`, `0`), or null. */
  default: string | null;
}

/**
 * How a table of the current schema stands in PostgreSQL's catalog: its columns in order, its primary key's
 * columns, its check constraints and its indexes (other than the primary key's), by name, each with the
 * definition PostgreSQL prints. For comparing an ORM's declaration of a table with the table itself.
 */
export async function catalogOf(db: Pool | PoolClient, table: string) {
  const { rows: columns } = await db.query<CatalogColumn>(
    `SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS "notNull",
            pg_get_expr(d.adbin, d.adrelid) AS default
       FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
      WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`,
    [table],
  );
  const { rows: keys } = await db.query<{ name: string }>(
    `SELECT a.attname AS name FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
      WHERE i.indrelid = $1::regclass AND i.indisprimary ORDER BY a.attnum`,
    [table],
  );
  const { rows: checks } = await db.query<{ name: string; definition: string }>(
    `SELECT conname AS name, pg_get_constraintdef(oid) AS definition FROM pg_constraint
      WHERE conrelid = $1::regclass AND contype = 'c' ORDER BY conname`,
    [table],
  );
  const { rows: indexes } = await db.query<{ name: string; definition: string }>(
    `SELECT c.relname AS name, pg_get_indexdef(i.indexrelid) AS definition
       FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
      WHERE i.indrelid = $1::regclass AND NOT i.indisprimary ORDER BY c.relname`,
    [table],
  );
  return { columns, primaryKey: keys.map((key) => key.name), checks, indexes };
}

/** The tables of `schema` whose name starts with `ipn_inbox` (what `store.migrate()` made there), sorted. */
export async function inboxTablesIn(db: Pool | PoolClient, schema: string): Promise<string[]> {
  const { rows } = await db.query<{ name: string }>(
    'SELECT table_name AS name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1',
    [schema],
  );
  return rows.map((row) => row.name).filter((name) => name.startsWith('ipn_inbox'));
}
