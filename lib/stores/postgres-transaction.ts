import type { DeliveryTransaction } from './store.js';

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
 * Opens a delivery transaction on a client of `pool`: `BEGIN` now; `commit` runs `markDelivered` (the
 * `delivered` update, guarded by the lease) in it, then `COMMIT`. The listeners get `db`, the same client
 * behind a guard: `release()` does nothing (ipn-kit releases it), and every query after the attempt ended is
 * refused, so a listener that outlives its attempt can never write outside the transaction.
 */
export async function openTransaction(
  pool: { connect(): Promise<unknown> },
  key: string,
  markDelivered: [string, unknown[]],
): Promise<DeliveryTransaction> {
  const client = (await pool.connect()) as PgPoolClient;
  if (typeof client?.query !== 'function' || typeof client.release !== 'function') {
    throw new TypeError('PostgresStore: pool.connect() must resolve a client with query() and release()');
  }
  let open = true; // while the listeners may write through `db`
  let ended = false;
  /** Gives the client back to the pool, or closes its connection (which rolls back whatever was open). */
  const finish = (destroy: boolean): void => {
    if (ended) return;
    ended = true;
    client.release(destroy || undefined);
  };
  try {
    await client.query('BEGIN');
  } catch (error) {
    finish(true);
    throw error;
  }
  const refused = (): Error =>
    new Error(
      `the delivery transaction of ${key} has ended (a listener failed, or ran past leaseMs): this write was not made`,
    );
  const db = new Proxy(client, {
    get(target, property) {
      const value: unknown = Reflect.get(target, property, target);
      if (property === 'release') return () => {};
      if (property === 'query') {
        return (...args: unknown[]) =>
          !open ? Promise.reject(refused()) : (value as (...a: unknown[]) => unknown).apply(target, args);
      }
      return typeof value === 'function' ? (value as () => unknown).bind(target) : value;
    },
  });
  return {
    db,
    async commit() {
      if (!open) throw refused();
      open = false;
      try {
        const { rowCount } = await client.query(...markDelivered);
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
