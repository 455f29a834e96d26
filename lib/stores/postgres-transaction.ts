import { LEASE_LOST } from './postgres-sql.js';
import type { DeliveryTransaction } from './store.js';

/**
 * How a delivery transaction marks its entry delivered: `statement`, then `COMMIT`; or `andCommit`, both in
 * one simple query that fails with {@link LEASE_LOST} when the lease was lost.
 */
export interface DeliveredMark {
  statement: [string, unknown[]];
  andCommit?: string;
}

/** A client a pool hands out (`pool.connect()`): what a delivery transaction runs on. */
export interface PgPoolClient {
  /** Runs one statement inside the transaction. */
  query(text: string, values?: unknown[]): Promise<{ rowCount: number | null }>;
  /** Gives the client back to its pool (destroying it when given `true` or an error). */
  release(destroy?: boolean | Error): void;
}

/** A pool as `pg` declares it: `connect()` hands out a client, or calls back with one. */
export interface PgConnectingPool<Client> {
  /** Hands out a client of the pool. */
  connect(): Promise<Client>;
  /** The callback form, which `pg` declares too. */
  connect(callback: never): void;
}

/** A pool with only the promise form of `connect()`. */
export interface PgPromisePool<Client> {
  /** Hands out a client of the pool. */
  connect(): Promise<Client>;
}

/**
 * The client type your pool hands out (a `pg` `PoolClient` for a `pg` `Pool`): the type of a listener's
 * `db` with {@link PostgresStore}. `never` for a pool that hands out none (a single `Client`): then listeners
 * get no `db`. Read from both of `connect`'s signatures, as `pg` declares two.
 */
export type PgClientOf<P> =
  P extends PgConnectingPool<infer Client>
    ? Client extends PgPoolClient
      ? Client
      : never
    : P extends PgPromisePool<infer Client>
      ? Client extends PgPoolClient
        ? Client
        : never
      : never;

/**
 * Whether `pool` hands out clients for transactions: it has `connect()`, and it is not itself a connected
 * `pg` `Client` (whose `connect()` connects it, and which carries a `connection`).
 */
export function canConnect(pool: object): pool is { connect(): Promise<unknown> } {
  return typeof Reflect.get(pool, 'connect') === 'function' && Reflect.get(pool, 'connection') === undefined;
}

/**
 * Opens a delivery transaction on a client of `pool`, lazily: the client is taken now, but `BEGIN` goes out
 * when a listener makes its first query through `db`, which runs once BEGIN has. `commit` then runs `mark`
 * (the `delivered` update, guarded by the lease) in it, and `COMMIT`. An attempt whose listeners never query
 * `db` has nothing to make atomic: `commit` gives the client back untouched and calls `markWithout` instead
 * (the store's batched settlement), sparing the attempt three round trips and a commit of its own.
 *
 * The listeners get `db`, the same client behind a guard: `release()` does nothing (ipn-kit releases it),
 * and every query after the attempt ended is refused, so a listener that outlives its attempt can never write
 * outside the transaction.
 */
export async function openTransaction(
  pool: { connect(): Promise<unknown> },
  key: string,
  mark: DeliveredMark,
  markWithout: () => Promise<boolean>,
): Promise<DeliveryTransaction> {
  const client = (await pool.connect()) as PgPoolClient;
  if (typeof client?.query !== 'function' || typeof client.release !== 'function') {
    throw new TypeError('PostgresStore: pool.connect() must resolve a client with query() and release()');
  }
  let open = true; // while the listeners may write through `db`
  let begun: Promise<{ error: unknown } | undefined> | undefined; // BEGIN, once a listener has queried
  let queue: Promise<unknown> = Promise.resolve(); // settles when the last query made has
  let ended = false;
  /** Gives the client back to the pool, or closes its connection (which rolls back whatever was open). */
  const finish = (destroy: boolean): void => {
    if (ended) return;
    ended = true;
    client.release(destroy || undefined);
  };
  const refused = (): Error =>
    new Error(
      `the delivery transaction of ${key} has ended (a listener failed, or ran past leaseMs): this write was not made`,
    );
  const db = new Proxy(client, {
    get(target, property) {
      const value: unknown = Reflect.get(target, property, target);
      if (property === 'release') return () => {};
      if (property === 'query') {
        return (...args: unknown[]) => {
          if (!open) return Promise.reject(refused());
          begun ??= target.query('BEGIN').then(
            () => undefined,
            (error: unknown) => ({ error }), // fails this query and the attempt; never unhandled
          );
          const started = Promise.all([begun, queue]).then(([failed]) => {
            if (failed) throw failed.error;
            if (!open) throw refused();
          });
          const { result, done } = inTurn(started, value as (...a: unknown[]) => unknown, target, args);
          queue = done;
          return result;
        };
      }
      return typeof value === 'function' ? (value as () => unknown).bind(target) : value;
    },
  });
  return {
    db,
    async commit() {
      if (!open) throw refused();
      open = false;
      if (begun === undefined) {
        finish(false);
        return markWithout();
      }
      try {
        const failed = await begun;
        if (failed) throw failed.error;
        if (mark.andCommit !== undefined) {
          const lost = await client.query(mark.andCommit).then(
            () => false,
            (error: unknown) => {
              if (Reflect.get(Object(error), 'code') === LEASE_LOST) return true;
              throw error;
            },
          );
          if (lost) await client.query('ROLLBACK'); // the COMMIT was skipped with the failed mark
          finish(false);
          return !lost;
        }
        const { rowCount } = await client.query(...mark.statement);
        if (rowCount !== 1) {
          // The lease was lost: another attempt holds the entry now. The listeners' writes must not land.
          await client.query('ROLLBACK');
          finish(false);
          return false;
        }
        await client.query('COMMIT');
        finish(false);
        return true;
      } catch (error) {
        finish(true); // both or neither: the database rolls back what did not commit
        throw error;
      }
    },
    async rollback(abandon = false) {
      open = false;
      if (ended) return;
      if (begun === undefined) return finish(false);
      if (abandon) return finish(true);
      try {
        await client.query('ROLLBACK');
        finish(false);
      } catch {
        finish(true);
      }
    },
  };
}

/**
 * Runs `query(...args)` on `client` once `started` resolves (BEGIN has answered, and the previous query of
 * the transaction has settled: the listeners run concurrently, and pg wants one query at a time on a
 * client). `result` has the shape pg gives for the way it was called: a promise; `undefined` for the
 * callback form (the callback gets the error if the query never ran); the submittable itself (a cursor, a
 * stream), told of such an error through its `handleError`. `done` settles when the query has.
 */
function inTurn(
  started: Promise<void>,
  query: (...args: unknown[]) => unknown,
  client: unknown,
  args: unknown[],
): { result: unknown; done: Promise<unknown> } {
  const last = args[args.length - 1];
  if (typeof last === 'function') {
    const done = started.then(
      () =>
        new Promise<void>((resolve) => {
          const callback = (...answer: unknown[]): void => {
            resolve();
            Reflect.apply(last, undefined, answer);
          };
          Reflect.apply(query, client, [...args.slice(0, -1), callback]);
        }),
      (error: unknown) => void Reflect.apply(last, undefined, [error]),
    );
    return { result: undefined, done };
  }
  const submittable = Object(args[0]) as { submit?: unknown; handleError?: unknown };
  if (typeof submittable.submit === 'function') {
    // pg queues a submittable behind it: the next query waits for none of it but its sending.
    const done = started.then(
      () => Reflect.apply(query, client, args),
      (error: unknown) => {
        if (typeof submittable.handleError === 'function') {
          Reflect.apply(submittable.handleError, submittable, [error]);
        }
      },
    );
    return { result: submittable, done };
  }
  const result = started.then<unknown>(() => Reflect.apply(query, client, args));
  return { result, done: result.catch(() => {}) };
}
