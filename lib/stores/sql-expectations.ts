import { expectationValues, type Expectation, type ExpectationStore } from './expectation-store.js';

/** The columns of `<table>_expected` that `put` writes, in the order of `expectationValues`. */
const COLUMNS = ['transaction_id', 'custom_data', 'amount', 'expected_at', 'due_at', 'attempts', 'account'];

/**
 * What one SQL database gives {@link SqlExpectations}: where the statements differ, and how they run (through
 * the store's own query: its error messages, its write gate).
 * @inline
 */
export interface ExpectationsDialect {
  /** `<table>_expected`, quoted. */
  readonly table: string;
  /** `<table>_control`, quoted: the sweep's lock is its row `sweep` (schema version 5). */
  readonly control: string;
  /** The placeholder of the n-th value, from 1: `$n` or `?`. */
  readonly param: (n: number) => string;
  /** What a read selects: `*`, or columns that encode `custom_data` (`decode` reads it back). @default '*' */
  readonly columns?: string;
  /** `custom_data` as `columns` read it. @default the text as it is */
  readonly decode?: (customData: string) => string;
  /** Runs a statement that returns rows. */
  readonly read: (text: string, values: unknown[]) => Promise<unknown[]>;
  /** Runs a statement that changes rows; resolves how many. */
  readonly write: (text: string, values: unknown[]) => Promise<number>;
  /** `put`'s upsert, when not `INSERT ... ON CONFLICT (transaction_id) DO UPDATE` (MySQL): text and values. */
  put?(e: Expectation): [string, unknown[]];
  /** `ExpectationStore.takeDue` in this database: the rows taken, as they are after it. */
  takeDue(now: number, nextDueAt: number, limit: number): Promise<unknown[]>;
  /**
   * `ExpectationStore.lockSweep` in this database: the row `sweep` of `<table>_control`, its owner in `value`
   * and its end in `until_ms`, taken when there is none, when it has ended, or when it is `owner`'s (renewed).
   */
  lockSweep(owner: string, ms: number): Promise<boolean>;
}

const absent = (value: unknown): value is null | undefined => value === null || value === undefined;

/**
 * Expectations in `<table>_expected` of a SQL store (PostgreSQL, MySQL, SQLite): shared by every instance over
 * the database, kept across restarts. Each database takes the due ones so that two instances never take the
 * same one (see its dialect).
 * @inline
 */
export class SqlExpectations implements ExpectationStore {
  readonly #d: ExpectationsDialect;

  constructor(dialect: ExpectationsDialect) {
    this.#d = dialect;
  }

  async put(e: Expectation): Promise<void> {
    const { table, param } = this.#d;
    const upsert = `INSERT INTO ${table} (${COLUMNS.join(', ')}) VALUES (${COLUMNS.map((_, i) => param(i + 1)).join(', ')})
       ON CONFLICT (transaction_id) DO UPDATE SET ${COLUMNS.slice(1)
         .map((c) => `${c} = excluded.${c}`)
         .join(', ')}`;
    await this.#d.write(...(this.#d.put?.(e) ?? [upsert, expectationValues(e)]));
  }

  async get(transactionId: string): Promise<Expectation | undefined> {
    const { table, param, columns = '*' } = this.#d;
    const [row] = await this.#d.read(`SELECT ${columns} FROM ${table} WHERE transaction_id = ${param(1)}`, [
      transactionId,
    ]);
    return row === undefined ? undefined : this.#toExpectation(row);
  }

  async delete(transactionId: string): Promise<void> {
    const { table, param } = this.#d;
    await this.#d.write(`DELETE FROM ${table} WHERE transaction_id = ${param(1)}`, [transactionId]);
  }

  async takeDue(now: number, nextDueAt: number, limit: number): Promise<Expectation[]> {
    return (await this.#d.takeDue(now, nextDueAt, limit)).map((row) => this.#toExpectation(row));
  }

  /** The lock is the row `sweep` of `<table>_control`: its owner in `value`, its end in `until_ms`. */
  lockSweep(owner: string, ms: number): Promise<boolean> {
    return this.#d.lockSweep(owner, ms);
  }

  async unlockSweep(owner: string): Promise<void> {
    const { control, param } = this.#d;
    await this.#d.write(`DELETE FROM ${control} WHERE name = 'sweep' AND value = ${param(1)}`, [owner]);
  }

  /** A row as read: a driver may give numbers as strings (`bigint`, `DECIMAL`). */
  #toExpectation(row: unknown): Expectation {
    const r = row as Record<string, string | number | null | undefined>;
    const decode = this.#d.decode ?? ((text: string) => text);
    return {
      transactionId: String(r.transaction_id),
      customData: absent(r.custom_data) ? undefined : decode(String(r.custom_data)),
      amount: absent(r.amount) ? undefined : Number(r.amount),
      account: absent(r.account) ? undefined : String(r.account),
      expectedAt: Number(r.expected_at),
      dueAt: Number(r.due_at),
      attempts: Number(r.attempts),
    };
  }
}
