import { SqlExpectations } from '../sql-expectations.js';
import { besideInbox } from './postgres-sql.js';

/** What the expectations run their queries through: the store's own query (with its error messages). */
type Query = (text: string, values: unknown[]) => Promise<{ rows: unknown[]; rowCount: number | null }>;

/** The name of the expectations table beside inbox `table`: `<table>_expected`, in the same schema. */
const expectedTable = (table: string): string => besideInbox(table, '_expected');

/**
 * The SQL that creates the expectations table beside the inbox `table` (`<table>_expected`), for teams that
 * run their own migrations; `PostgresStore.migrate()` runs it too. Idempotent. Times are the app's clock in
 * milliseconds since the epoch.
 */
export function postgresExpectationsSql(table = 'ipn_inbox'): string {
  return `CREATE TABLE IF NOT EXISTS ${expectedTable(table)} (
  transaction_id text PRIMARY KEY,
  custom_data text,
  amount double precision,
  expected_at bigint NOT NULL,
  due_at bigint NOT NULL,
  attempts integer NOT NULL DEFAULT 0
);
`;
}

/**
 * Expectations in PostgreSQL, in `<table>_expected`, through the store's `query`. Taking the due ones locks
 * their rows (`FOR UPDATE SKIP LOCKED`), so two instances never take the same one. The sweep's lock is the
 * row `sweep` of `<table>_control` (schema version 5), and ends by the database's clock.
 */
export function postgresExpectations(query: Query, table: string): SqlExpectations {
  const t = expectedTable(table);
  const control = besideInbox(table, '_control');
  const nowMs = `(extract(epoch from clock_timestamp()) * 1000)::bigint`;
  return new SqlExpectations({
    table: t,
    control,
    param: (n) => `$${n}`,
    read: async (text, values) => (await query(text, values)).rows,
    write: async (text, values) => (await query(text, values)).rowCount ?? 0,
    takeDue: async (now, nextDueAt, limit) =>
      (
        await query(
          `WITH due AS (
             SELECT transaction_id FROM ${t}
             WHERE due_at <= $1 ORDER BY due_at, transaction_id LIMIT $3
             FOR UPDATE SKIP LOCKED
           )
           UPDATE ${t} AS e SET due_at = $2, attempts = e.attempts + 1
           FROM due WHERE e.transaction_id = due.transaction_id RETURNING e.*`,
          [now, nextDueAt, limit],
        )
      ).rows,
    lockSweep: async (owner, ms) => {
      const { rowCount } = await query(
        `INSERT INTO ${control} AS c (name, value, until_ms) VALUES ('sweep', $1, ${nowMs} + $2)
         ON CONFLICT (name) DO UPDATE SET value = $1, until_ms = ${nowMs} + $2, updated_at = now()
         WHERE c.value = $1 OR c.until_ms IS NULL OR c.until_ms < ${nowMs}`,
        [owner, Math.ceil(ms)],
      );
      return rowCount === 1;
    },
  });
}
