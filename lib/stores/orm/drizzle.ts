import { guardCheckouts } from '../guard-checkouts.js';
import type { Statement, StatementResult, Transactions } from '../transactions.js';
import { LateQueryError } from './late-query.js';

/**
 * What ipn-kit needs of a Drizzle database (`drizzle(pool)`): its transaction helper and `execute`. Written
 * out here, as ipn-kit never loads drizzle-orm, not even its types.
 * @inline
 */
export interface DrizzleDatabase {
  /** `db.transaction(work, config?)`: Drizzle's own transaction helper. */
  transaction(work: never, config?: never): Promise<unknown>;
  /** `db.execute(query)`: runs a statement. */
  execute(query: never): PromiseLike<unknown>;
}

/**
 * The transaction Drizzle hands to `db.transaction`'s callback (a `PgTransaction` for PostgreSQL), typed as
 * Drizzle types it for your database and schema: what listeners get as `tx`.
 */
export type DrizzleTransactionOf<Db> = Db extends {
  transaction(work: (tx: infer Tx) => Promise<unknown>, ...rest: never[]): Promise<unknown>;
}
  ? Tx
  : never;

/**
 * Options of {@link drizzleTransactions}.
 * @inline
 */
export interface DrizzleTransactionsOptions<Db extends DrizzleDatabase> {
  /**
   * The second argument of `db.transaction(work, config)` for each delivery attempt: PostgreSQL's
   * `{ isolationLevel, accessMode, deferrable }`. Drizzle's default (and PostgreSQL's, read committed) is
   * what ipn-kit's lease needs: the `delivered` mark re-checks the lease when it runs.
   * @default undefined
   */
  config?: Parameters<Db['transaction']>[1];
}

/**
 * The statement as Drizzle takes one: an `SQLWrapper` (`getSQL()`) whose SQL builds to the text and values
 * as they are (`toQuery()`). `db.execute` and `tx.execute` call exactly these two methods, from drizzle-orm
 * 0.36 to 1.0, so the values go to the driver as bound parameters, never into the text; the `sql` tag
 * would build the same object, but ipn-kit cannot import it.
 */
function drizzleQuery(statement: Statement) {
  const query = { sql: statement.text, params: statement.values };
  const sql = { toQuery: () => query };
  return { getSQL: () => sql };
}

/** What ipn-kit calls on the database and on its transactions, with the types it calls them with. */
interface DrizzleRunner {
  transaction(work: (tx: unknown) => Promise<unknown>, config?: unknown): Promise<unknown>;
  execute(query: ReturnType<typeof drizzleQuery>): PromiseLike<unknown>;
}

/** Runs `work` in a Drizzle transaction (with Drizzle's `config`). */
type Begin = (work: (tx: unknown) => Promise<unknown>, config: unknown) => Promise<unknown>;

/** What ipn-kit calls on Drizzle's session of a database (`db.session`): its transaction, on its `client`. */
interface DrizzleSession {
  client: unknown;
  transaction(work: (tx: unknown) => Promise<unknown>, config?: unknown): Promise<unknown>;
}

/** A client a pool hands out (pg's, or @neondatabase/serverless's): `release(error)` destroys it. */
interface PooledClient {
  release(error?: Error | boolean): void;
}

/**
 * Drizzle's transaction on a pool (node-postgres, neon-serverless) takes a client, sends its BEGIN, and only
 * then enters the `try` whose `finally` releases that client: a BEGIN that fails (the connection dropped
 * between the checkout and the BEGIN, as behind a transaction-mode pooler while the server restarts) leaves
 * the client checked out for good. The pool loses one client each time, until it has none left and every
 * delivery waits, and `pool.end()` never resolves. So ipn-kit takes the client itself and runs Drizzle's own
 * transaction on it (the database's session given that client: Drizzle's path for a single connection,
 * which releases nothing), then releases it whatever happened: destroyed when the transaction failed before
 * the work began, as that connection's state is unknown. `undefined` when the database is not over such a
 * pool, or its session is not as this expects: Drizzle's own transaction then, as it is.
 */
function onOwnCheckout(db: object): Begin | undefined {
  const pool: unknown = Reflect.get(db, '$client');
  const session: unknown = Reflect.get(db, 'session');
  // A pg Pool (or @neondatabase/serverless's, which extends it): `connect()` hands out a client to release.
  if (
    typeof pool !== 'object' ||
    pool === null ||
    typeof Reflect.get(pool, 'connect') !== 'function' ||
    typeof Reflect.get(pool, 'idleCount') !== 'number'
  ) {
    return undefined;
  }
  if (
    typeof session !== 'object' ||
    session === null ||
    Reflect.get(session, 'client') !== pool ||
    typeof Reflect.get(session, 'transaction') !== 'function'
  ) {
    return undefined;
  }
  const connect = Reflect.get(pool, 'connect') as () => Promise<unknown>;
  return async (work, config) => {
    const client = (await connect.call(pool)) as PooledClient;
    if (
      typeof client !== 'object' ||
      client === null ||
      typeof Reflect.get(client, 'release') !== 'function'
    ) {
      throw new TypeError('drizzleTransactions: the pool handed out a client with no release()');
    }
    // Drizzle tells a pool from a connection by its class's name: a client it would take for a pool.
    const name: unknown = (Object.getPrototypeOf(client) as { constructor?: { name?: unknown } } | null)
      ?.constructor?.name;
    if (typeof name === 'string' && name.includes('Pool')) {
      client.release();
      return (session as DrizzleSession).transaction(work, config);
    }
    let ended: 'work' | 'released' | undefined;
    const guarded = refuseLateQueries(client, () => ended);
    const onClient = Object.create(session, { client: { value: guarded } }) as DrizzleSession;
    let began = false;
    let failure: unknown;
    try {
      return await onClient.transaction((tx) => {
        began = true;
        const running = work(tx);
        const end = () => void (ended ??= 'work');
        running.then(end, end); // before Drizzle's own COMMIT or ROLLBACK, which awaits it after
        return running;
      }, config);
    } catch (error) {
      failure = error ?? true;
      throw error;
    } finally {
      ended = 'released';
      // Failed before the work began: the BEGIN did, on a connection whose state is unknown.
      const destroy = failure !== undefined && !began;
      client.release(destroy ? (failure instanceof Error ? failure : true) : undefined);
    }
  };
}

/**
 * `client` as Drizzle's session of one delivery gets it: once the work has settled, only Drizzle's own
 * `commit` or `rollback` runs on it, and nothing once it went back to the pool. A query builder a listener
 * took from `tx` in time, and ran once its attempt was abandoned, went to this client: after the ROLLBACK,
 * committed on its own, or in whatever transaction the client's next user had opened.
 */
function refuseLateQueries(client: object, ended: () => 'work' | 'released' | undefined): object {
  const query: unknown = Reflect.get(client, 'query');
  if (typeof query !== 'function') return client;
  const refused = (...args: unknown[]): unknown => {
    const state = ended();
    const first: unknown = args[0];
    const text: unknown = typeof first === 'string' ? first : Reflect.get(Object(first), 'text');
    const ends = typeof text === 'string' && /^\s*(commit|rollback)\s*$/i.test(text); // harmless when late
    if (state === 'released' || (state === 'work' && !ends)) {
      return Promise.reject(new LateQueryError('drizzleTransactions'));
    }
    return Reflect.apply(query, client, args) as unknown;
  };
  return new Proxy(client, {
    get: (target, property) =>
      property === 'query' ? refused : (Reflect.get(target, property, target) as unknown),
  });
}

/** A value, in a few words, for an error message: `null`, `a Pool`. */
function describeValue(value: unknown): string {
  if (value === null || typeof value !== 'object') return String(value);
  return `a ${value.constructor?.name ?? 'object'}`;
}

/**
 * The rows and count of what `execute` resolved, as each PostgreSQL driver of Drizzle gives it: node-postgres
 * (and Neon, Vercel) a `QueryResult` (`rows`, `rowCount`), PGlite `rows` and `affectedRows`, postgres.js the
 * rows themselves, an array that carries `count`.
 */
function toResult(result: unknown, statement: Statement): StatementResult {
  const rows = Array.isArray(result) ? result : (result as { rows?: unknown } | null)?.rows;
  if (!Array.isArray(rows)) {
    throw new TypeError(
      `drizzleTransactions: execute() resolved ${describeValue(result)}, not rows: is this Drizzle over a PostgreSQL driver?`,
    );
  }
  const changed = [
    Reflect.get(result as object, 'rowCount'),
    Reflect.get(result as object, 'affectedRows'),
    Reflect.get(result as object, 'count'),
  ].find((n) => typeof n === 'number');
  const count = statement.returns === 'rows' ? rows.length : (changed ?? rows.length);
  return { rows: rows as Array<Record<string, unknown>>, count };
}

/**
 * The driver's own error when Drizzle wrapped it (drizzle-orm 0.44 and later throw a `DrizzleQueryError`,
 * "Failed query: ... params: ...", with the driver's error as `cause`): so that the store reads PostgreSQL's
 * error code as it does through `pg`, and a message never copies the statement's values (an inbox record
 * holds customer data).
 */
function unwrap(error: unknown): unknown {
  const wrapped =
    error instanceof Error &&
    error.message.startsWith('Failed query:') &&
    Array.isArray(Reflect.get(error, 'params')) &&
    error.cause instanceof Error;
  return wrapped ? error.cause : error;
}

/** Runs `statement` through `runner.execute`: on the database (outside any transaction), or in a `tx`. */
async function run(runner: DrizzleRunner, statement: Statement): Promise<StatementResult> {
  let result: unknown;
  try {
    result = await runner.execute(drizzleQuery(statement));
  } catch (error) {
    throw unwrap(error);
  }
  return toResult(result, statement);
}

/**
 * Whether Drizzle's client (`db.$client`) is one `pg` connection (a `Client`, or a client a pool handed out:
 * they carry their `connection`) rather than a pool. Drizzle's node-postgres driver takes a client of a pool
 * for each transaction, but opens each transaction of a single connection on that connection.
 */
function onOneConnection(client: unknown): boolean {
  return (
    typeof client === 'object' &&
    client !== null &&
    typeof Reflect.get(client, 'query') === 'function' &&
    typeof Reflect.get(client, 'connection') === 'object' &&
    Reflect.get(client, 'connection') !== null
  );
}

/**
 * Runs each delivery attempt in a Drizzle transaction (`db.transaction`): listeners write through their
 * context's `tx`, Drizzle's transaction typed for your schema, and ipn-kit's `delivered` mark commits with
 * their writes or rolls back with them. A `tx.transaction(...)` of a listener is a savepoint inside it, as
 * Drizzle makes it. For Drizzle over a PostgreSQL driver that has transactions: node-postgres (`pg`),
 * postgres.js, PGlite, Neon's WebSocket driver (not `neon-http`, which has none).
 *
 * It also gives the store `execute`, so that the store can run its own statements through Drizzle alone.
 *
 * @param db your Drizzle database, `drizzle(pool)` (or `drizzle({ client: pool, schema })`), over a pool:
 *   each delivery holds one of its connections for its transaction.
 * @throws TypeError when `db` is not a Drizzle database (a Drizzle transaction is not one), or runs on a
 *   single `pg` connection (a `Client`).
 * @example
 * ```ts
 * import { drizzle } from 'drizzle-orm/node-postgres';
 * import { PostgresStore } from 'ipn-kit/postgres';
 * import { drizzleTransactions } from 'ipn-kit/orm';
 *
 * const db = drizzle(pool);
 * const store = new PostgresStore({ pool, transactions: drizzleTransactions(db) });
 * const ipn = ipnRouter({ store, delivery: 'at-least-once' });
 * ipn.on('successful', async (n, { tx }) => {
 *   await tx.insert(ledger).values({ transactionId: n.transaction_id, amount: String(n.amount) });
 * });
 * ```
 */
export function drizzleTransactions<Db extends DrizzleDatabase>(
  db: Db,
  options: DrizzleTransactionsOptions<Db> = {},
): Transactions<DrizzleTransactionOf<Db>> {
  if (
    typeof db !== 'object' ||
    db === null ||
    typeof Reflect.get(db, 'transaction') !== 'function' ||
    typeof Reflect.get(db, 'execute') !== 'function'
  ) {
    throw new TypeError(
      `drizzleTransactions: expected a Drizzle database (drizzle(pool) from drizzle-orm/node-postgres), got ${describeValue(db)}`,
    );
  }
  if (onOneConnection(Reflect.get(db, '$client'))) {
    throw new TypeError(
      'drizzleTransactions: this Drizzle database runs on one connection (a pg Client): Drizzle would open ' +
        "every delivery's transaction on it, and two deliveries at once would share one transaction. Give " +
        'Drizzle a pool: drizzle(new Pool(...))',
    );
  }
  // A Drizzle transaction has `transaction` (a savepoint) and `execute` too, and `rollback` besides, which a
  // database has not: every delivery would be a savepoint of that one transaction, on one connection.
  if (typeof Reflect.get(db, 'rollback') === 'function') {
    throw new TypeError(
      'drizzleTransactions: expected a Drizzle database (drizzle(pool)), got a Drizzle transaction: every ' +
        'delivery would run in it, as a savepoint, and commit only when it does. Pass the database',
    );
  }
  // Drizzle takes a client of its pool for each transaction and listens to none of its events.
  guardCheckouts(Reflect.get(db, '$client'));
  const runner = db as unknown as DrizzleRunner;
  const config: unknown = options.config;
  const begin: Begin = onOwnCheckout(db) ?? ((work, config) => runner.transaction(work, config));
  return {
    name: 'Drizzle',
    // Drizzle gives the transaction's connection back to its pool when it ends, and would still run a query
    // made through the transaction object then on that connection, committed at once: the core refuses
    // every use of the object a listener got once its attempt has ended (see refuseLateWrites).
    transaction: <T>(work: (tx: DrizzleTransactionOf<Db>) => Promise<T>) =>
      // Drizzle's own COMMIT that fails (a deferred constraint, a serialization failure) is wrapped too.
      (begin(work as (tx: unknown) => Promise<unknown>, config) as Promise<T>).catch((error: unknown) => {
        throw unwrap(error);
      }),
    query: (tx, statement) => run(tx as DrizzleRunner, statement),
    execute: (statement) => run(runner, statement),
  };
}
