import { guardCheckouts } from '../guard-checkouts.js';
import type { Statement, StatementResult, Transactions } from '../transactions.js';
import { LateQueryError } from './late-query.js';

/**
 * What ipn-kit needs of a Kysely instance (`new Kysely<Database>({ dialect })`): its transaction builder,
 * `withoutPlugins()` and `executeQuery`. Written out here, as ipn-kit never loads kysely, not even its types.
 * @inline
 */
export interface KyselyDatabase {
  /** `db.transaction()`: Kysely's transaction builder. */
  transaction(): {
    /** Runs `callback` in a new transaction. */
    execute(callback: never): Promise<unknown>;
  };
  /** `db.withoutPlugins()`: the same instance without its plugins. */
  withoutPlugins(): unknown;
  /** `db.executeQuery(compiledQuery)`: runs a compiled query. */
  executeQuery(query: never): Promise<unknown>;
}

/**
 * The transaction Kysely hands to `db.transaction().execute`'s callback (a `Transaction<Database>`), typed
 * as Kysely types it for your database interface: what listeners get as `tx`.
 */
export type KyselyTransactionOf<Db> = Db extends {
  transaction(): { execute(callback: (trx: infer Tx) => Promise<unknown>): Promise<unknown> };
}
  ? Tx
  : never;

/**
 * A compiled query, as `CompiledQuery.raw(text, values)` makes one: the text and its values as they are
 * (bound as parameters by the dialect's driver), and the `RawNode` Kysely's types ask for, which nothing
 * compiles again. `queryId` is what plugins key their state by (`executeQuery` reads it from the query
 * since Kysely 0.28, and makes its own before).
 */
function compiledQuery(statement: Statement) {
  return {
    sql: statement.text,
    parameters: statement.values,
    query: { kind: 'RawNode', sqlFragments: [statement.text], parameters: [] },
    queryId: { queryId: `ipn-kit-${++queries}` },
  };
}
let queries = 0;

/** What ipn-kit calls on an instance or a transaction, with the types it calls them with. */
interface KyselyRunner {
  transaction(): { execute(callback: (trx: unknown) => Promise<unknown>): Promise<unknown> };
  withPlugin(plugin: {
    transformQuery(args: { node: unknown }): unknown;
    transformResult(args: { result: unknown }): Promise<unknown>;
  }): KyselyRunner;
  withoutPlugins(): KyselyRunner;
  getExecutor(): { provideConnection(consumer: (connection: unknown) => Promise<unknown>): Promise<unknown> };
  executeQuery(query: ReturnType<typeof compiledQuery>): Promise<{
    rows: Array<Record<string, unknown>>;
    numAffectedRows?: bigint;
    numUpdatedOrDeletedRows?: bigint;
  }>;
}

/**
 * Runs `statement` on `runner` without its plugins: a plugin transforms results (the `CamelCasePlugin`
 * renames `lease_until` to `leaseUntil`), and the store reads its rows by their column names. Kysely's
 * count is a `bigint`, and `undefined` for a statement other than an insert, update, delete or merge.
 */
async function run(runner: KyselyRunner, statement: Statement): Promise<StatementResult> {
  const { rows, numAffectedRows, numUpdatedOrDeletedRows } = await runner
    .withoutPlugins()
    .executeQuery(compiledQuery(statement));
  const changed = numAffectedRows ?? numUpdatedOrDeletedRows; // the second from a dialect older than 0.23
  const count = statement.returns === 'rows' || changed === undefined ? rows.length : Number(changed);
  return { rows, count };
}

/**
 * `trx` as listeners get it: carrying a plugin whose `transformQuery` throws once `ended()`. Kysely calls it
 * when a query builder (or a `sql` template run on the transaction) is compiled, which `execute()` does when
 * it is called: a builder a listener took from `tx` in time and runs once its attempt has ended is refused,
 * for good, in ipn-kit's words. While the transaction is open its connection refuses it too (below); once it
 * has ended, Kysely 0.28 refuses it itself, and this whatever the version. ipn-kit's own statements (`run`)
 * are compiled already, and run without plugins.
 */
function refuseLateBuilders(trx: KyselyRunner, ended: () => boolean): KyselyRunner {
  return trx.withPlugin({
    transformQuery: ({ node }) => {
      if (ended()) throw new LateQueryError('kyselyTransactions');
      return node;
    },
    transformResult: ({ result }) => Promise.resolve(result),
  });
}

/**
 * Kysely's methods of a `Transaction` that make another `Transaction` of the same transaction (0.27 to 0.29;
 * the last three since 0.29).
 */
const derivations = [
  'withPlugin',
  'withoutPlugins',
  'withSchema',
  'withTables',
  '$extendTables',
  '$omitTables',
  '$pickTables',
];

/** What a listener would do with each method {@link refuseOwnTransactions} refuses, and why not. */
const outOfTransaction: Record<string, string> = {
  startTransaction:
    "begin a transaction of its own on the delivery's transaction (tx.startTransaction()): its BEGIN and " +
    "COMMIT go to the delivery's connection, and its commit() would commit your writes without the " +
    'delivered mark',
  connection:
    "take the delivery's connection out of its transaction (tx.connection()): a transaction begun on it " +
    'would commit your writes without the delivered mark',
};

/**
 * `trx` as listeners get it: its `startTransaction()` and `connection()` throw, and so do those of every
 * `Transaction` it makes (`withPlugin`, `withoutPlugins`, `withSchema`, `withTables`, and Kysely 0.29's
 * `$extendTables`, `$omitTables`, `$pickTables`: each a new object), as
 * own properties of the object itself (Kysely's methods read its private fields: a Proxy would break them).
 * Kysely 0.28 gives a `Transaction` its instance's `startTransaction()`: a controlled transaction on the
 * delivery's connection, whose `BEGIN` only warns there, whose `commit()` commits the listener's writes
 * without the `delivered` mark (and whose state is its own: a builder of its `withoutPlugins()` escapes the
 * guards, and lands, late, in the next user's transaction). The retried attempt credits again. Kysely
 * refuses `connection()` itself, without saying why; ipn-kit refuses it first, and says. ipn-kit's own
 * statements take only `withoutPlugins()` of it, and its connection from the object Kysely handed it.
 */
function refuseOwnTransactions<T>(trx: T): T {
  if (typeof trx !== 'object' || trx === null) return trx;
  const own: Record<string, unknown> = {};
  for (const [name, what] of Object.entries(outOfTransaction)) {
    own[name] = () => {
      throw new TypeError(
        `kyselyTransactions: a listener cannot ${what}, so that the retried attempt writes them again. ` +
          'Write through tx itself: ipn-kit commits it together with the delivered mark once every listener ' +
          'has resolved. To roll it back, throw from the listener (a Kysely Transaction has no savepoint to ' +
          'undo part of it).',
      );
    };
  }
  for (const name of derivations) {
    const method: unknown = Reflect.get(trx, name);
    if (typeof method === 'function') {
      own[name] = (...args: unknown[]): unknown =>
        refuseOwnTransactions(Reflect.apply(method, trx, args) as unknown);
    }
  }
  for (const [name, value] of Object.entries(own)) {
    Reflect.defineProperty(trx, name, { value, configurable: true, writable: true }); // or not: frozen
  }
  return trx;
}

/** Where a transaction stands, as the guard of its connection reads it. */
type Stage = 'open' | 'ended' | 'released';

/**
 * Each connection object's guard, set on it once (its `executeQuery` and `streamQuery`, as own properties),
 * and the stage of the transaction now on it, read by that guard; none between transactions.
 */
const guards = new WeakMap<object, { stage?: () => Stage }>();

/**
 * Guards the connection Kysely runs a transaction on (its `DatabaseConnection`, a `PostgresConnection`): while
 * `stage()` is `'ended'` (the work has settled), it runs only a COMMIT or ROLLBACK (Kysely's own, or a late
 * one, harmless then), and everything once that has run, before Kysely gives it back to its pool. What the
 * plugin above cannot see goes through it: a query a listener sent in time that waited in Kysely's queue of
 * the transaction behind its own slow one (Kysely runs a transaction's queries one at a time; its ROLLBACK
 * goes to the connection directly, ahead of it), or a builder of `tx.withoutPlugins()`. Either ran after the
 * ROLLBACK, committed on its own. The returned function lets the connection go (once the transaction has
 * ended however it did), unless another transaction has it by then.
 *
 * One guard per connection object, set the first time and reading the transaction now on it, never a
 * wrapper per transaction: a dialect that ends a transaction other than through `executeQuery` (Kysely's
 * PGlite dialect, on its main branch, commits through PGlite's own API) and hands out one connection
 * object never ran the COMMIT that took a wrapper off, and each delivery wrapped the last one's: every query
 * walked them all, until one threw "Maximum call stack size exceeded".
 */
function refuseLateQueries(connection: object, stage: () => Stage): () => void {
  let guard = guards.get(connection);
  if (guard === undefined) {
    const executeQuery: unknown = Reflect.get(connection, 'executeQuery');
    const streamQuery: unknown = Reflect.get(connection, 'streamQuery');
    if (typeof executeQuery !== 'function' || typeof streamQuery !== 'function') return () => {};
    const own: { stage?: () => Stage } = {};
    const ends = (query: unknown) =>
      /^\s*(commit|rollback)\b/i.test(String(Reflect.get(Object(query), 'sql')));
    const guarded = {
      executeQuery: (query: unknown): unknown => {
        const current = own.stage;
        if (current?.() !== 'ended') return Reflect.apply(executeQuery, connection, [query]);
        if (!ends(query)) return Promise.reject(new LateQueryError('kyselyTransactions'));
        const done = () => void (own.stage === current && (own.stage = undefined));
        return (Reflect.apply(executeQuery, connection, [query]) as Promise<unknown>).finally(done);
      },
      streamQuery: (...args: unknown[]): unknown => {
        if (own.stage?.() === 'ended') throw new LateQueryError('kyselyTransactions');
        return Reflect.apply(streamQuery, connection, args);
      },
    };
    for (const [name, method] of Object.entries(guarded)) {
      Reflect.defineProperty(connection, name, { value: method, configurable: true, writable: true }); // or not: frozen
    }
    guards.set(connection, (guard = own));
  }
  const set = guard;
  set.stage = stage;
  return () => void (set.stage === stage && (set.stage = undefined));
}

/** A value, in a few words, for an error message: `null`, `a Pool`. */
function describeValue(value: unknown): string {
  if (value === null || typeof value !== 'object') return String(value);
  return `a ${value.constructor?.name ?? 'object'}`;
}

/**
 * Options of {@link kyselyTransactions}.
 * @inline
 */
export interface KyselyTransactionsOptions {
  /**
   * The `pg` pool your `PostgresDialect` was given. Kysely listens to no `error` of the client it checks out
   * for a transaction, so a server ending a delivery's connection (a restart, `pg_terminate_backend`, a
   * pooler's disconnect, a hosted timeout) would stop the process; given the pool, ipn-kit listens on each
   * client it hands out, and the attempt fails and is retried instead. `PostgresStore` does so for its own
   * `pool`: needed only when Kysely's pool is another one, or the store has none.
   * @default undefined
   */
  pool?: unknown;
}

/**
 * Runs each delivery attempt in a Kysely transaction (`db.transaction().execute(...)`): listeners write
 * through their context's `tx`, Kysely's `Transaction` typed for your database interface, and ipn-kit's
 * `delivered` mark commits with their writes or rolls back with them. Kysely has no nested transaction:
 * `tx.transaction()` throws, as it does in any Kysely transaction; `tx.startTransaction()` (a controlled
 * transaction, Kysely 0.28) and `tx.connection()` throw too, and so do those of `tx.withoutPlugins()` and
 * every other `Transaction` made of `tx`.
 *
 * It also gives the store `execute`, so that the store can run its own statements through Kysely alone.
 * ipn-kit's statements run without your plugins (`withoutPlugins()`), so that a `CamelCasePlugin` does not
 * rename the columns it reads; your own queries keep them.
 *
 * @param db your Kysely instance, over PostgreSQL (`PostgresDialect`, or another PostgreSQL dialect).
 * @param options `pool`: the dialect's pool, when it is not the store's.
 * @throws TypeError when `db` is not a Kysely instance (a Kysely `Transaction` is not one).
 * @example
 * ```ts
 * import { Kysely, PostgresDialect } from 'kysely';
 * import { PostgresStore } from 'ipn-kit/postgres';
 * import { kyselyTransactions } from 'ipn-kit/orm';
 *
 * const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
 * const store = new PostgresStore({ pool, transactions: kyselyTransactions(db) });
 * const ipn = ipnRouter({ store, delivery: 'at-least-once' });
 * ipn.on('successful', async (n, { tx }) => {
 *   await tx.insertInto('ledger').values({ transaction_id: n.transaction_id, amount: n.amount }).execute();
 * });
 * ```
 */
export function kyselyTransactions<Db extends KyselyDatabase>(
  db: Db,
  options: KyselyTransactionsOptions = {},
): Transactions<KyselyTransactionOf<Db>> {
  if (
    typeof db !== 'object' ||
    db === null ||
    typeof Reflect.get(db, 'transaction') !== 'function' ||
    typeof Reflect.get(db, 'executeQuery') !== 'function' ||
    typeof Reflect.get(db, 'withoutPlugins') !== 'function'
  ) {
    throw new TypeError(
      `kyselyTransactions: expected a Kysely instance (new Kysely({ dialect })), got ${describeValue(db)}`,
    );
  }
  // A Kysely `Transaction` has the same methods, but refuses `transaction()`: every delivery would fail.
  if (Reflect.get(db, 'isTransaction') === true) {
    throw new TypeError(
      'kyselyTransactions: expected a Kysely instance (new Kysely({ dialect })), got a Kysely Transaction: pass the instance',
    );
  }
  guardCheckouts(options.pool);
  const runner = db as unknown as KyselyRunner;
  return {
    name: 'Kysely',
    transaction: <T>(work: (tx: KyselyTransactionOf<Db>) => Promise<T>) =>
      (async () => {
        let state: Stage = 'open';
        let release = () => {};
        try {
          return (await runner.transaction().execute(async (trx) => {
            const transaction = trx as KyselyRunner;
            const connection = await transaction.getExecutor().provideConnection((c) => Promise.resolve(c));
            if (typeof connection === 'object' && connection !== null) {
              release = refuseLateQueries(connection, () => state);
            }
            const running = work(
              refuseOwnTransactions(
                refuseLateBuilders(transaction, () => state !== 'open'),
              ) as KyselyTransactionOf<Db>,
            );
            const end = () => void (state = 'ended');
            running.then(end, end); // before Kysely's own COMMIT or ROLLBACK, which awaits it after
            return running;
          })) as T;
        } finally {
          state = 'released';
          release();
        }
      })(),
    query: (tx, statement) => run(tx as unknown as KyselyRunner, statement),
    execute: (statement) => run(runner, statement),
  };
}
