import { SqlExpectations } from '../sql-expectations.js';

/** How the expectations run their statements: through the store (its write gate, its error messages). */
export interface ExpectationQueries {
  read(text: string, values: unknown[]): Promise<unknown[]>;
  write(text: string, values: unknown[]): Promise<number>;
  writeReturning(text: string, values: unknown[]): Promise<unknown[]>;
}

/**
 * Expectations in SQLite, in `<table>_expected` (made by `SqliteStore.migrate()`): shared by every process
 * on the file, kept across restarts. Taking the due ones is one `UPDATE ... RETURNING`: one writer at a
 * time, so two processes never take the same one. The sweep's lock is the row `sweep` of `<table>_control`
 * (schema version 5), and ends by the app's clock.
 */
export function sqliteExpectations(q: ExpectationQueries, table: string): SqlExpectations {
  const t = `"${table}_expected"`;
  const control = `"${table}_control"`;
  return new SqlExpectations({
    table: t,
    control,
    param: () => '?',
    read: (text, values) => q.read(text, values),
    write: (text, values) => q.write(text, values),
    takeDue: (now, nextDueAt, limit) =>
      q.writeReturning(
        `UPDATE ${t} SET due_at = ?, attempts = attempts + 1
         WHERE transaction_id IN (
           SELECT transaction_id FROM ${t}
           WHERE due_at <= ? ORDER BY due_at, transaction_id LIMIT ?
         )
         RETURNING *`,
        [nextDueAt, now, limit],
      ),
    lockSweep: async (owner, ms) => {
      const now = Date.now();
      const changed = await q.write(
        `INSERT INTO ${control} (name, value, updated_ms, until_ms) VALUES ('sweep', ?, ?, ?)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_ms = excluded.updated_ms,
           until_ms = excluded.until_ms
         WHERE value = ? OR until_ms IS NULL OR until_ms < ?`,
        [owner, now, now + Math.ceil(ms), owner, now],
      );
      return changed === 1;
    },
  });
}
