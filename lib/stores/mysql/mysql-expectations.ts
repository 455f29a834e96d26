import type { Expectation, ExpectationStore } from '../expectation-store.js';
import {
  affectedOf,
  DUPLICATE_KEY,
  errnoOf,
  rowsOf,
  type MysqlPoolConnection,
  type MysqlQueryResult,
} from './mysql-pool.js';
import { asUtf8Hex, fromUtf8Hex, UTF8_TEXT } from './mysql-rows.js';
import { msOf, mysqlTableNames, NOW } from './mysql-sql.js';

/** What the expectations run their statements through: the store's own (with its error messages). */
export interface ExpectationQueries {
  query(text: string, values: unknown[]): Promise<MysqlQueryResult>;
  transaction<T>(work: (connection: MysqlPoolConnection) => Promise<T>): Promise<T>;
}

/** The sweep's lock is a row of its own, under an id no transaction can have (ids are never empty). */
const LOCK_ID = '';

/** The database's now in milliseconds since the epoch. */
const NOW_MS = msOf(NOW);

/**
 * The columns an expectation is read from. `custom_data` goes both ways as hex of its utf8mb4 bytes (see
 * `asUtf8Hex`): through a pool of another charset (`utf8`, `latin1`) the text itself would be changed on the
 * way (an emoji to `?`), and a notification's `custom_data` would no longer equal its expectation's.
 */
const COLUMNS =
  'transaction_id, HEX(custom_data) AS custom_data, amount, expected_at, due_at, attempts, account';

interface Row {
  transaction_id: string;
  account?: string | null;
  custom_data: string | null;
  amount: number | null;
  expected_at: string | number;
  due_at: string | number;
  attempts: number | string;
}

const toExpectation = (row: Row): Expectation => ({
  transactionId: String(row.transaction_id),
  customData: row.custom_data === null ? undefined : fromUtf8Hex(String(row.custom_data)),
  amount: row.amount === null ? undefined : Number(row.amount),
  account: row.account === null || row.account === undefined ? undefined : String(row.account),
  expectedAt: Number(row.expected_at),
  dueAt: Number(row.due_at),
  attempts: Number(row.attempts),
});

/**
 * Expectations in MySQL, in `<table>_expected`: shared by every instance, kept across restarts. Taking the
 * due ones locks their rows (`FOR UPDATE SKIP LOCKED`, in a transaction), so two instances never take the
 * same one.
 * @inline
 */
export class MysqlExpectations implements ExpectationStore {
  readonly #run: ExpectationQueries;
  readonly #t: string;

  constructor(run: ExpectationQueries, table: string) {
    this.#run = run;
    this.#t = mysqlTableNames(table).expected;
  }

  async put(e: Expectation): Promise<void> {
    const values = [
      e.customData === undefined ? null : asUtf8Hex(e.customData),
      e.amount ?? null,
      e.expectedAt,
      e.dueAt,
      e.attempts,
      e.account ?? null,
    ];
    // The values twice, for the insert and the update: VALUES() in ON DUPLICATE KEY UPDATE is deprecated in
    // MySQL 8, and its replacement (an alias) is not MariaDB's.
    await this.#run.query(
      `INSERT INTO ${this.#t} (transaction_id, custom_data, amount, expected_at, due_at, attempts, account)
       VALUES (?, ${UTF8_TEXT}, ?, ?, ?, ?, ?)
       ON DUPLICATE KEY UPDATE custom_data = ${UTF8_TEXT}, amount = ?, expected_at = ?, due_at = ?,
         attempts = ?, account = ?`,
      [e.transactionId, ...values, ...values],
    );
  }

  async get(transactionId: string): Promise<Expectation | undefined> {
    if (transactionId === LOCK_ID) return undefined;
    const result = await this.#run.query(`SELECT ${COLUMNS} FROM ${this.#t} WHERE transaction_id = ?`, [
      transactionId,
    ]);
    const [row] = rowsOf(result);
    return row === undefined ? undefined : toExpectation(row as unknown as Row);
  }

  async delete(transactionId: string): Promise<void> {
    await this.#run.query(`DELETE FROM ${this.#t} WHERE transaction_id = ? AND transaction_id <> ''`, [
      transactionId,
    ]);
  }

  async takeDue(now: number, nextDueAt: number, limit: number): Promise<Expectation[]> {
    const count = Math.max(0, Math.floor(limit));
    if (count === 0) return [];
    return this.#run.transaction(async (connection) => {
      const rows = rowsOf(
        await connection.query(
          // Read in the order of the index (due_at, transaction_id): a sorted read would lock every due row.
          `SELECT ${COLUMNS} FROM ${this.#t} FORCE INDEX (ipn_kit_due) WHERE transaction_id <> '' AND due_at <= ?
           ORDER BY due_at, transaction_id LIMIT ${count} FOR UPDATE SKIP LOCKED`,
          [now],
        ),
      ) as unknown as Row[];
      if (rows.length === 0) return [];
      await connection.query(
        `UPDATE ${this.#t} SET due_at = ?, attempts = attempts + 1 WHERE transaction_id IN (?)`,
        [nextDueAt, rows.map((row) => row.transaction_id)],
      );
      // The rows are locked: what the update made of them is known without reading them again.
      return rows.map((row) => ({
        ...toExpectation(row),
        dueAt: nextDueAt,
        attempts: Number(row.attempts) + 1,
      }));
    });
  }

  /**
   * The lock row holds its owner in `custom_data` and its end (the database's clock, in ms) in `due_at`.
   * Extended or taken over (expired) by an update whose condition is read before it sets anything; made
   * by an insert when there is none, where a duplicate key means another owner made it first.
   */
  async lockSweep(owner: string, ms: number): Promise<boolean> {
    const extra = Math.ceil(ms);
    const updated = await this.#run.query(
      `UPDATE ${this.#t} SET custom_data = ?, due_at = ${NOW_MS} + ?
       WHERE transaction_id = '' AND (custom_data = ? OR due_at < ${NOW_MS})`,
      [owner, extra, owner],
    );
    if (affectedOf(updated) === 1) return true;
    try {
      await this.#run.query(
        `INSERT INTO ${this.#t} (transaction_id, custom_data, expected_at, due_at, attempts)
         VALUES ('', ?, 0, ${NOW_MS} + ?, 0)`,
        [owner, extra],
      );
      return true;
    } catch (error) {
      if (errnoOf(error) === DUPLICATE_KEY) return false;
      throw error;
    }
  }

  async unlockSweep(owner: string): Promise<void> {
    await this.#run.query(`DELETE FROM ${this.#t} WHERE transaction_id = '' AND custom_data = ?`, [owner]);
  }
}
