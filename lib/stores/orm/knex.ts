import type { Statement, StatementResult, Transactions } from '../transactions.js';
import { describeArgument } from './argument.js';
import { refuseEnd } from './refuse-end.js';
import { replaceQuotedMarks } from './sql-literals.js';

/**
 * What `knex.transaction(scope)` hands its callback, as your Knex instance's type says: `Knex.Transaction`.
 * Read from the callback overload of `transaction`, so ipn-kit names no type of Knex.
 * @inline
 */
export type KnexTransactionOf<K> = K extends {
  transaction(scope: (trx: infer Trx) => unknown, ...rest: never[]): unknown;
}
  ? Trx
  : never;

/**
 * The part of a Knex instance (or of a transaction) that the adapter calls.
 * @inline
 */
export interface KnexLike {
  /** `knex.transaction(callback)`: opens each delivery attempt's transaction. */
  transaction: (...args: never[]) => unknown;
  /** `knex.raw(sql, bindings)`: runs the store's statements. */
  raw: (...args: never[]) => unknown;
}

/** How the adapter calls them: `raw` resolves `pg`'s result on PostgreSQL, mysql2's `[rows, fields]` on MySQL. */
interface Raw {
  raw(sql: string, bindings: unknown[]): PromiseLike<unknown>;
}
interface Begin<Tx> {
  transaction<T>(scope: (trx: Tx) => Promise<T>): Promise<T>;
}

/** A `$n` placeholder of PostgreSQL. */
const NUMBERED = /\$(\d+)/g;

/**
 * `statement` as Knex's raw wants it: `?` for each value, the values in the order of their `?` (Knex binds
 * them in order, so a `$2` used twice is bound twice, and `$10` is not `$1` followed by a 0). Every `?`
 * already in a `$n` text (a JSON operator, a literal) is escaped as `\?`, so Knex binds nothing there and
 * sends a plain `?`. A text in `?` style (MySQL, SQLite) passes through, but for the `?` inside its quoted
 * parts (`'why?'`), escaped so: Knex reads every `?` of a raw text as a binding, quoted or not. The store's
 * SQL has no `$n` inside a literal today: a `$1` inside a quoted literal would be taken for a placeholder.
 * @throws TypeError for a `$n` with no value, or a backslash before a `?` (Knex would eat it).
 */
export function knexBindings(statement: Statement): { sql: string; bindings: unknown[] } {
  const { text, values } = statement;
  // Knex reads `\?` as an escaped `?` and drops the backslash: such a text would reach the database changed.
  if (text.includes('\\?')) {
    throw new TypeError(`knexTransactions: a statement cannot hold a backslash before a '?': ${text}`);
  }
  const bindings = values.map((value) => (value === undefined ? null : value)); // Knex refuses undefined
  const numbered = text.search(NUMBERED) !== -1;
  if (!numbered && bindings.length > 0) return { sql: replaceQuotedMarks(text, '\\?'), bindings };
  const ordered: unknown[] = [];
  const sql = text.replaceAll('?', '\\?').replace(NUMBERED, (placeholder, n: string) => {
    if (Number(n) < 1 || Number(n) > bindings.length) {
      throw new TypeError(
        `knexTransactions: ${placeholder} has no value (${bindings.length} given): ${text}`,
      );
    }
    ordered.push(bindings[Number(n) - 1]);
    return '?';
  });
  return { sql, bindings: ordered };
}

/**
 * What `raw` resolved, as a {@link StatementResult}: on PostgreSQL, `pg`'s result (`rows`, `rowCount`), or
 * one per statement for a text of several (the last one is the answer); on MySQL, mysql2's `[rows, fields]`,
 * or `[header, undefined]` for a write, whose `affectedRows` is the count (the rows matched, with mysql2's
 * default flags).
 */
function resultOf(result: unknown, returns: Statement['returns']): StatementResult {
  if (isMysqlResult(result)) {
    const [first] = result;
    if (Array.isArray(first)) return { rows: first as Array<Record<string, unknown>>, count: first.length };
    return { rows: [], count: returns === 'rows' ? 0 : first.affectedRows };
  }
  const last = (Array.isArray(result) ? result[result.length - 1] : result) as
    { rows?: Array<Record<string, unknown>>; rowCount?: number | null } | undefined;
  const rows = last?.rows ?? [];
  return { rows, count: returns === 'rows' ? rows.length : (last?.rowCount ?? 0) };
}

/**
 * Whether `result` is mysql2's: a pair whose first is the rows or a header with `affectedRows`. (`pg`'s
 * results, one or several, are objects with `rows`: never an array first, nor an `affectedRows`.)
 */
function isMysqlResult(result: unknown): result is [Array<unknown> | { affectedRows: number }, unknown] {
  if (!Array.isArray(result) || result.length !== 2) return false;
  const first: unknown = result[0];
  return (
    Array.isArray(first) ||
    (typeof first === 'object' && first !== null && typeof Reflect.get(first, 'affectedRows') === 'number')
  );
}

async function run(on: Raw, statement: Statement): Promise<StatementResult> {
  const { sql, bindings } = knexBindings(statement);
  return resultOf(await on.raw(sql, bindings), statement.returns);
}

/**
 * Runs each delivery attempt in a Knex transaction (`knex.transaction(callback)`): listeners get its
 * `Knex.Transaction` as `tx`, and what they write through it commits together with ipn-kit's `delivered`
 * mark, or not at all. A `tx.transaction(...)` of theirs is a savepoint, as Knex makes it; `tx.commit()` and
 * `tx.rollback()` throw (ipn-kit ends the transaction, with the mark: a listener rolls it back by throwing).
 * The store's statements run through `tx.raw()`, their `$n` placeholders turned into Knex's `?` bindings
 * (a MySQL store's `?` pass through); with `execute`, through `knex.raw()`, so the store may run through Knex
 * alone. For PostgreSQL (`client: 'pg'`) and MySQL or MariaDB (`client: 'mysql2'`, for `MysqlStore`).
 *
 * @param knex your Knex instance, `knex({ client: 'pg', connection })` (or `client: 'mysql2'`).
 * @throws TypeError when `knex` is not a Knex instance (a Knex transaction is not one).
 * @example
 * import knex from 'knex';
 * import { PostgresStore } from 'ipn-kit/postgres';
 * import { knexTransactions } from 'ipn-kit/orm';
 *
 * const db = knex({ client: 'pg', connection: process.env.DATABASE_URL });
 * const store = new PostgresStore({ pool, transactions: knexTransactions(db) });
 * const ipn = ipnRouter({ store, delivery: 'at-least-once' });
 * ipn.on('successful', async (n, { tx }) => {
 *   await tx('ledger').insert({ transaction_id: n.transaction_id, amount: n.amount });
 * });
 */
export function knexTransactions<K extends KnexLike>(knex: K): Transactions<KnexTransactionOf<K>> {
  if (
    typeof knex !== 'function' ||
    typeof Reflect.get(knex, 'transaction') !== 'function' ||
    typeof Reflect.get(knex, 'raw') !== 'function'
  ) {
    // The knex module's default export is a function too, the factory: the instance is what it returns.
    const hint =
      typeof knex === 'function' ? ' (call the knex function with your config: it returns one)' : '';
    throw new TypeError(
      `knexTransactions: expected a Knex instance (knex({ client: 'pg', connection })), got ${describeArgument(knex)}${hint}`,
    );
  }
  // A transaction is a function with `transaction` and `raw` too: each delivery would be a savepoint of that
  // one transaction, on one connection, committed only if and when its owner commits it.
  if (Reflect.get(knex, 'isTransaction') === true) {
    throw new TypeError(
      "knexTransactions: expected a Knex instance (knex({ client: 'pg', connection })), got a Knex transaction: " +
        'every delivery would run in it, as a savepoint, and commit only when it does. Pass the instance',
    );
  }
  type Tx = KnexTransactionOf<K>;
  return {
    name: 'Knex',
    transaction: (work) => (knex as unknown as Begin<Tx>).transaction((trx) => work(refuseEnd(trx, 'Knex'))),
    query: (tx, statement) => run(tx as unknown as Raw, statement),
    execute: (statement) => run(knex, statement),
  };
}
