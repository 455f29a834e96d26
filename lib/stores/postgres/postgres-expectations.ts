import { expectationValues, type Expectation, type ExpectationStore } from '../expectation-store.js';
import { tableNames } from './postgres-sql.js';

/** What the expectations run their queries through: the store's own query (with its error messages). */
type Query = (text: string, values: unknown[]) => Promise<{ rows: unknown[]; rowCount: number | null }>;

const SUFFIX = '_expected';
/** The sweep's lock is a row of its own, under an id no transaction can have (ids are never empty). */
const LOCK_ID = '';

/** The name of the expectations table beside inbox `table`: `<table>_expected`, in the same schema. */
function expectedTable(table: string): string {
  const { quoted } = tableNames(table);
  const parts = quoted.split('.');
  const name = (parts.pop() as string).slice(1, -1);
  return [...parts, `"${name.slice(0, 63 - SUFFIX.length)}${SUFFIX}"`].join('.');
}

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

interface Row {
  transaction_id: string;
  account?: string | null;
  custom_data: string | null;
  amount: number | null;
  expected_at: string | number;
  due_at: string | number;
  attempts: number;
}

const toExpectation = (row: Row): Expectation => ({
  transactionId: row.transaction_id,
  customData: row.custom_data ?? undefined,
  amount: row.amount ?? undefined,
  account: row.account ?? undefined,
  expectedAt: Number(row.expected_at),
  dueAt: Number(row.due_at),
  attempts: row.attempts,
});

/**
 * Expectations in PostgreSQL, in `<table>_expected`: shared by every instance, kept across restarts. Taking
 * the due ones locks their rows (`FOR UPDATE SKIP LOCKED`), so two instances never take the same one.
 * @inline
 */
export class PostgresExpectations implements ExpectationStore {
  readonly #query: Query;
  readonly #t: string;
  readonly #table: string;

  constructor(query: Query, table: string) {
    this.#query = query;
    this.#table = table;
    this.#t = expectedTable(table);
  }

  /** Creates the table if it does not exist, with the account column of schema version 4. */
  async migrate(): Promise<void> {
    await this.#query(
      `${postgresExpectationsSql(this.#table)}ALTER TABLE ${this.#t} ADD COLUMN IF NOT EXISTS account text;\n`,
      [],
    );
  }

  async put(e: Expectation): Promise<void> {
    await this.#query(
      `INSERT INTO ${this.#t} (transaction_id, custom_data, amount, expected_at, due_at, attempts, account)
       VALUES ($1, $2, $3, $4, $5, $6, $7)
       ON CONFLICT (transaction_id) DO UPDATE SET custom_data = $2, amount = $3, expected_at = $4,
         due_at = $5, attempts = $6, account = $7`,
      expectationValues(e),
    );
  }

  async get(transactionId: string): Promise<Expectation | undefined> {
    if (transactionId === LOCK_ID) return undefined;
    const { rows } = await this.#query(`SELECT * FROM ${this.#t} WHERE transaction_id = $1`, [transactionId]);
    return rows.length > 0 ? toExpectation(rows[0] as Row) : undefined;
  }

  async delete(transactionId: string): Promise<void> {
    await this.#query(`DELETE FROM ${this.#t} WHERE transaction_id = $1 AND transaction_id <> ''`, [
      transactionId,
    ]);
  }

  async takeDue(now: number, nextDueAt: number, limit: number): Promise<Expectation[]> {
    const { rows } = await this.#query(
      `WITH due AS (
         SELECT transaction_id FROM ${this.#t}
         WHERE transaction_id <> '' AND due_at <= $1 ORDER BY due_at, transaction_id LIMIT $3
         FOR UPDATE SKIP LOCKED
       )
       UPDATE ${this.#t} AS e SET due_at = $2, attempts = e.attempts + 1
       FROM due WHERE e.transaction_id = due.transaction_id RETURNING e.*`,
      [now, nextDueAt, limit],
    );
    return (rows as Row[]).map(toExpectation);
  }

  /** The lock row holds its owner in `custom_data` and its end (the database's clock) in `due_at`. */
  async lockSweep(owner: string, ms: number): Promise<boolean> {
    const until = `(extract(epoch from clock_timestamp()) * 1000)::bigint`;
    const { rowCount } = await this.#query(
      `INSERT INTO ${this.#t} AS e (transaction_id, custom_data, expected_at, due_at)
       VALUES ('', $1, 0, ${until} + $2)
       ON CONFLICT (transaction_id) DO UPDATE SET custom_data = $1, due_at = ${until} + $2
       WHERE e.custom_data = $1 OR e.due_at < ${until}`,
      [owner, Math.ceil(ms)],
    );
    return rowCount === 1;
  }

  async unlockSweep(owner: string): Promise<void> {
    await this.#query(`DELETE FROM ${this.#t} WHERE transaction_id = '' AND custom_data = $1`, [owner]);
  }
}
