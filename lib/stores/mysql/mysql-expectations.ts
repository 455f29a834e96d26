import { expectationValues } from '../expectation-store.js';
import { SqlExpectations } from '../sql-expectations.js';
import {
  affectedOf,
  DUPLICATE_KEY,
  errnoOf,
  rowsOf,
  type MysqlPoolConnection,
  type MysqlQueryResult,
} from './mysql-pool.js';
import { mysqlControlTable } from './mysql-schema.js';
import { asUtf8Hex, fromUtf8Hex, UTF8_TEXT } from './mysql-rows.js';
import { msOf, mysqlTableNames, NOW } from './mysql-sql.js';

/** What the expectations run their statements through: the store's own (with its error messages). */
export interface ExpectationQueries {
  query(text: string, values: unknown[]): Promise<MysqlQueryResult>;
  transaction<T>(work: (connection: MysqlPoolConnection) => Promise<T>): Promise<T>;
}

/** The database's now in milliseconds since the epoch. */
const NOW_MS = msOf(NOW);

/**
 * The columns an expectation is read from. `custom_data` goes both ways as hex of its utf8mb4 bytes (see
 * `asUtf8Hex`): through a pool of another charset (`utf8`, `latin1`) the text itself would be changed on the
 * way (an emoji to `?`), and a notification's `custom_data` would no longer equal its expectation's.
 */
const COLUMNS =
  'transaction_id, HEX(custom_data) AS custom_data, amount, expected_at, due_at, attempts, account';

/**
 * Expectations in MySQL, in `<table>_expected`: shared by every instance, kept across restarts. Taking the
 * due ones locks their rows (`FOR UPDATE SKIP LOCKED`, in a transaction), so two instances never take the
 * same one. The sweep's lock is the row `sweep` of `<table>_control` (schema version 5), and ends by the
 * database's clock.
 */
export function mysqlExpectations(run: ExpectationQueries, table: string): SqlExpectations {
  const t = mysqlTableNames(table).expected;
  const control = mysqlControlTable(table);
  return new SqlExpectations({
    table: t,
    control,
    param: () => '?',
    columns: COLUMNS,
    decode: fromUtf8Hex,
    read: async (text, values) => rowsOf(await run.query(text, values)),
    write: async (text, values) => affectedOf(await run.query(text, values)),
    put(e) {
      // expectationValues' order, the custom data as the hex of its UTF-8 (see UTF8_TEXT)
      const values = [
        e.customData === undefined ? null : asUtf8Hex(e.customData),
        ...expectationValues(e).slice(2),
      ];
      // The values twice, for the insert and the update: VALUES() in ON DUPLICATE KEY UPDATE is deprecated in
      // MySQL 8, and its replacement (an alias) is not MariaDB's.
      const text = `INSERT INTO ${t} (transaction_id, custom_data, amount, expected_at, due_at, attempts, account)
       VALUES (?, ${UTF8_TEXT}, ?, ?, ?, ?, ?)
       ON DUPLICATE KEY UPDATE custom_data = ${UTF8_TEXT}, amount = ?, expected_at = ?, due_at = ?,
         attempts = ?, account = ?`;
      return [text, [e.transactionId, ...values, ...values]];
    },
    async takeDue(now, nextDueAt, limit) {
      const count = Math.max(0, Math.floor(limit));
      if (count === 0) return [];
      return run.transaction(async (connection) => {
        const rows = rowsOf(
          await connection.query(
            // Read in the order of the index (due_at, transaction_id): a sorted read would lock every due row.
            `SELECT ${COLUMNS} FROM ${t} FORCE INDEX (ipn_kit_due) WHERE due_at <= ?
             ORDER BY due_at, transaction_id LIMIT ${count} FOR UPDATE SKIP LOCKED`,
            [now],
          ),
        );
        if (rows.length === 0) return [];
        await connection.query(
          `UPDATE ${t} SET due_at = ?, attempts = attempts + 1 WHERE transaction_id IN (?)`,
          [nextDueAt, rows.map((row) => row.transaction_id)],
        );
        // The rows are locked: what the update made of them is known without reading them again.
        return rows.map((row) => ({ ...row, due_at: nextDueAt, attempts: Number(row.attempts) + 1 }));
      });
    },
    /**
     * Extended or taken over (expired) by an update whose condition is read before it sets anything; made
     * by an insert when there is none, where a duplicate key means another owner made it first.
     */
    async lockSweep(owner, ms) {
      const extra = Math.ceil(ms);
      const updated = await run.query(
        `UPDATE ${control} SET value = ?, until_ms = ${NOW_MS} + ?, updated_ms = ${NOW_MS}
         WHERE name = 'sweep' AND (value = ? OR until_ms IS NULL OR until_ms < ${NOW_MS})`,
        [owner, extra, owner],
      );
      if (affectedOf(updated) === 1) return true;
      try {
        await run.query(
          `INSERT INTO ${control} (name, value, updated_ms, until_ms) VALUES ('sweep', ?, ${NOW_MS}, ${NOW_MS} + ?)`,
          [owner, extra],
        );
        return true;
      } catch (error) {
        if (errnoOf(error) === DUPLICATE_KEY) return false;
        throw error;
      }
    },
  });
}
