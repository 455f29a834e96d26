import type { Statement, StatementResult, Transactions } from '../transactions.js';
import { describeArgument } from './argument.js';
import { refuseEnd } from './refuse-end.js';

/**
 * The `Transaction` your Sequelize instance's type gives: what `sequelize.transaction()` resolves (the
 * overload without a callback), so ipn-kit names no type of Sequelize.
 * @inline
 */
export type SequelizeTransactionOf<S> = S extends { transaction(...args: never[]): Promise<infer Tx> }
  ? Tx
  : never;

/**
 * The part of a Sequelize instance that the adapter calls.
 * @inline
 */
export interface SequelizeLike {
  /** `sequelize.transaction(callback)`: opens each delivery attempt's transaction (a managed one). */
  transaction: (...args: never[]) => unknown;
  /** `sequelize.query(sql, options)`: runs the store's statements. */
  query: (...args: never[]) => unknown;
  /** Sequelize's own: tells it from another client with a `transaction` and a `query` (a TypeORM DataSource). */
  getQueryInterface: (...args: never[]) => unknown;
}

/**
 * `sequelize.query`'s options that the adapter gives. `type` (a `QueryTypes` value, a plain string) decides
 * what Sequelize resolves: `SELECT`, the rows; `BULKUPDATE`, the count of rows changed (`pg`'s `rowCount`).
 * The default, `RAW`, would resolve `[rows, result]`, or `[rows, rowCount]` for a text starting with
 * `INSERT INTO`: two shapes for one kind of call.
 */
interface QueryOptions<Tx> {
  type: 'SELECT' | 'BULKUPDATE';
  raw: true;
  /** All the rows, whatever the app's defaults (`options.query` of the Sequelize instance) say. */
  plain: false;
  bind?: unknown[];
  /** `null`: none, even when the app has turned on Sequelize's CLS (it reads only `undefined` as unset). */
  transaction: Tx | null;
}
interface Sequelize<Tx> {
  transaction<T>(work: (t: Tx) => PromiseLike<T>): Promise<T>;
  query(sql: string, options: QueryOptions<Tx>): Promise<unknown>;
}

/**
 * The driver's error inside a Sequelize error (its `original`), or `error` as it is. Sequelize's own has no
 * `code`, and the store reads PostgreSQL's code from what its statements reject with: a missing table
 * (`42P01`) to say "run migrate()", an aborted transaction (`25P02`) to say why a commit failed.
 */
function driverErrorOf(error: unknown): unknown {
  const original: unknown =
    typeof error === 'object' && error !== null ? Reflect.get(error, 'original') : undefined;
  return original instanceof Error ? original : error;
}

/**
 * Runs each delivery attempt in a managed Sequelize transaction (`sequelize.transaction(callback)`):
 * listeners get its `Transaction` as `tx`, and what they write **with `{ transaction: tx }`** commits
 * together with ipn-kit's `delivered` mark, or not at all. A call without it runs on another connection,
 * outside the delivery's transaction, and commits whatever happens to the attempt: Sequelize's CLS (off
 * by default) does not reach listeners, which run outside the transaction's callback, so pass `tx` to every
 * call. `sequelize.transaction({ transaction: tx }, ...)` of theirs is a savepoint; `tx.commit()` and
 * `tx.rollback()` throw (ipn-kit ends the transaction, with the mark: a listener rolls it back by throwing).
 *
 * The store's statements run through `sequelize.query()` with `bind` (Sequelize passes `$1` through to
 * PostgreSQL, and reads a `$$` as `$`: the store's SQL has none); with `execute`, outside any transaction,
 * so the store may run through Sequelize alone. Sequelize 6.
 *
 * @param sequelize your Sequelize instance, `new Sequelize(url, { dialect: 'postgres' })`.
 * @throws TypeError when `sequelize` is not a Sequelize instance.
 * @example
 * import { Sequelize } from 'sequelize';
 * import { PostgresStore } from 'ipn-kit/postgres';
 * import { sequelizeTransactions } from 'ipn-kit/orm';
 *
 * const sequelize = new Sequelize(process.env.DATABASE_URL, { dialect: 'postgres' });
 * const store = new PostgresStore({ pool, transactions: sequelizeTransactions(sequelize) });
 * const ipn = ipnRouter({ store, delivery: 'at-least-once' });
 * ipn.on('successful', async (n, { tx }) => {
 *   await Ledger.create({ transactionId: n.transaction_id, amount: n.amount }, { transaction: tx });
 * });
 */
export function sequelizeTransactions<S extends SequelizeLike>(
  sequelize: S,
): Transactions<SequelizeTransactionOf<S>> {
  if (
    typeof sequelize !== 'object' ||
    sequelize === null ||
    typeof Reflect.get(sequelize, 'transaction') !== 'function' ||
    typeof Reflect.get(sequelize, 'query') !== 'function' ||
    typeof Reflect.get(sequelize, 'getQueryInterface') !== 'function'
  ) {
    // The Sequelize class itself is a function: the instance is what `new` makes of it.
    const hint = typeof sequelize === 'function' ? ' (construct it: new Sequelize(url, options))' : '';
    throw new TypeError(
      `sequelizeTransactions: expected a Sequelize instance (new Sequelize(url, { dialect: 'postgres' })), got ${describeArgument(sequelize)}${hint}`,
    );
  }
  type Tx = SequelizeTransactionOf<S>;
  const client = sequelize as unknown as Sequelize<Tx>;
  const run = async (
    transaction: Tx | null,
    { text, values, returns }: Statement,
  ): Promise<StatementResult> => {
    const options: QueryOptions<Tx> = {
      type: returns === 'rows' ? 'SELECT' : 'BULKUPDATE',
      raw: true,
      plain: false,
      transaction,
    };
    // Without values, no bind: Sequelize would still read every `$` of the text as a placeholder.
    if (values.length > 0) options.bind = values.map((value) => (value === undefined ? null : value));
    const result = await client.query(text, options).catch((error: unknown) => {
      throw driverErrorOf(error);
    });
    if (returns === 'rows') {
      const rows = result as Array<Record<string, unknown>>;
      return { rows, count: rows.length };
    }
    return { rows: [], count: result as number };
  };
  return {
    name: 'Sequelize',
    transaction: (work) => client.transaction((t) => work(refuseEnd(t, 'Sequelize'))),
    query: (tx, statement) => run(tx, statement),
    execute: (statement) => run(null, statement),
  };
}
