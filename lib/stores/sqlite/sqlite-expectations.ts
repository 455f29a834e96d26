import { expectationValues, type Expectation, type ExpectationStore } from '../expectation-store.js';

/** How the expectations run their statements: through the store (its write gate, its error messages). */
export interface ExpectationQueries {
  read(text: string, values: unknown[]): Promise<unknown[]>;
  write(text: string, values: unknown[]): Promise<number>;
  writeReturning(text: string, values: unknown[]): Promise<unknown[]>;
}

/** The sweep's lock is a row of its own, under an id no transaction can have (ids are never empty). */
const LOCK_ID = '';

interface Row {
  transaction_id: string;
  account?: string | null;
  custom_data: string | null;
  amount: number | null;
  expected_at: number;
  due_at: number;
  attempts: number;
}

const toExpectation = (row: Row): Expectation => ({
  transactionId: row.transaction_id,
  customData: row.custom_data ?? undefined,
  amount: row.amount ?? undefined,
  account: row.account ?? undefined,
  expectedAt: Number(row.expected_at),
  dueAt: Number(row.due_at),
  attempts: Number(row.attempts),
});

/**
 * Expectations in SQLite, in `<table>_expected` (made by `SqliteStore.migrate()`): shared by every process
 * on the file, kept across restarts. Taking the due ones is one `UPDATE ... RETURNING`: one writer at a
 * time, so two processes never take the same one.
 * @inline
 */
export class SqliteExpectations implements ExpectationStore {
  readonly #q: ExpectationQueries;
  readonly #t: string;

  constructor(queries: ExpectationQueries, table: string) {
    this.#q = queries;
    this.#t = `"${table}_expected"`;
  }

  async put(e: Expectation): Promise<void> {
    await this.#q.write(
      `INSERT INTO ${this.#t} (transaction_id, custom_data, amount, expected_at, due_at, attempts, account)
       VALUES (?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (transaction_id) DO UPDATE SET custom_data = excluded.custom_data,
         amount = excluded.amount, expected_at = excluded.expected_at, due_at = excluded.due_at,
         attempts = excluded.attempts, account = excluded.account`,
      expectationValues(e),
    );
  }

  async get(transactionId: string): Promise<Expectation | undefined> {
    if (transactionId === LOCK_ID) return undefined;
    const rows = await this.#q.read(`SELECT * FROM ${this.#t} WHERE transaction_id = ?`, [transactionId]);
    return rows.length > 0 ? toExpectation(rows[0] as Row) : undefined;
  }

  async delete(transactionId: string): Promise<void> {
    await this.#q.write(`DELETE FROM ${this.#t} WHERE transaction_id = ? AND transaction_id <> ''`, [
      transactionId,
    ]);
  }

  async takeDue(now: number, nextDueAt: number, limit: number): Promise<Expectation[]> {
    const rows = await this.#q.writeReturning(
      `UPDATE ${this.#t} SET due_at = ?, attempts = attempts + 1
       WHERE transaction_id IN (
         SELECT transaction_id FROM ${this.#t}
         WHERE transaction_id <> '' AND due_at <= ? ORDER BY due_at, transaction_id LIMIT ?
       )
       RETURNING *`,
      [nextDueAt, now, limit],
    );
    return (rows as Row[]).map(toExpectation);
  }

  /** The lock row holds its owner in `custom_data` and its end (the app's clock) in `due_at`. */
  async lockSweep(owner: string, ms: number): Promise<boolean> {
    const now = Date.now();
    const until = now + Math.ceil(ms);
    const changed = await this.#q.write(
      `INSERT INTO ${this.#t} (transaction_id, custom_data, expected_at, due_at) VALUES ('', ?, 0, ?)
       ON CONFLICT (transaction_id) DO UPDATE SET custom_data = excluded.custom_data, due_at = excluded.due_at
       WHERE custom_data = ? OR due_at < ?`,
      [owner, until, owner, now],
    );
    return changed === 1;
  }

  async unlockSweep(owner: string): Promise<void> {
    await this.#q.write(`DELETE FROM ${this.#t} WHERE transaction_id = '' AND custom_data = ?`, [owner]);
  }
}
