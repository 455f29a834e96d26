import { LEASE_LOST } from './postgres-sql.js';
import { DeliveryError, IpnKitError, messageOf, StoreError } from '../shared/errors.js';
import type { DeliveryTransaction } from './store.js';

/**
 * How a delivery transaction marks its entry delivered: `statement`, then `COMMIT`; or the query
 * `andCommit()` gives, both in one simple query that fails with {@link LEASE_LOST} when the lease was lost
 * (built only for a transaction a listener opened; `undefined` when the key cannot stand in it).
 */
export interface DeliveredMark {
  statement: [string, unknown[]];
  andCommit(): string | undefined;
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
 * Opens a delivery transaction lazily: nothing is taken from `pool` until a listener makes its first query
 * through `db`; that query takes a client, sends `BEGIN` on it, then runs. `commit` waits for every query
 * the listeners made (awaited or not), then runs `mark` (the `delivered` update, guarded by the lease) and
 * `COMMIT`. An attempt whose listeners never query `db` has nothing to make atomic and holds no client:
 * `commit` calls `markWithout` instead (the store's batched settlement). So listeners that write through
 * your pool rather than `db` never wait for a client that an idle attempt holds.
 *
 * `db` stands for that client: before its first query it offers what the pool's client class does
 * (`escapeLiteral`, and `instanceof` holds), after it the client itself. `release()` does nothing (ipn-kit
 * releases it), and a query made once the attempt has ended is refused, in the form it was made (a rejected
 * promise, marked handled; the callback called with the error; the submittable's `handleError`), so a
 * listener that outlives its attempt never writes outside the transaction. An `error` the connection emits
 * meanwhile (the server ended it) is kept, fails the commit, and never reaches the process.
 */
export function openTransaction(
  pool: { connect(): Promise<unknown> },
  key: string,
  mark: DeliveredMark,
  markWithout: () => Promise<boolean>,
): DeliveryTransaction {
  let client: PgPoolClient | undefined;
  let begun: Promise<{ error: unknown } | undefined> | undefined; // the client taken and BEGIN sent
  let queue: Promise<unknown> = Promise.resolve(); // settles when the last query made has
  let open = true; // the listeners may still make queries
  let rolledBack = false; // queries already made are refused too
  let committing = false;
  let ended = false;
  let broken: unknown; // what the connection emitted as 'error' while this attempt held it
  const onError = (error: unknown): void => {
    broken ??= error;
  };
  /** Gives the client back to the pool, or closes its connection (which rolls back whatever was open). */
  const finish = (destroy: boolean): void => {
    if (ended) return;
    ended = true;
    if (!client) return;
    (Reflect.get(client, 'removeListener') as Listening | undefined)?.call(client, 'error', onError);
    client.release(destroy || broken !== undefined || undefined);
  };
  // A DeliveryError: the write was refused because the attempt ended, not because the database failed.
  const refused = (): DeliveryError =>
    new DeliveryError(
      `the delivery transaction of ${key} has ended (a listener failed, or ran past leaseMs): this write was ` +
        'not made; it is made again with the next attempt, in its own transaction',
    );
  const connectAndBegin = async (): Promise<undefined> => {
    const taken = (await pool.connect()) as PgPoolClient;
    if (typeof taken?.query !== 'function' || typeof taken.release !== 'function') {
      throw new TypeError('PostgresStore: pool.connect() must resolve a client with query() and release()');
    }
    if (ended) {
      taken.release(); // the attempt ended while the pool was handing it out
      throw refused();
    }
    client = taken;
    (Reflect.get(client, 'on') as Listening | undefined)?.call(client, 'error', onError);
    await client.query('BEGIN');
    return undefined;
  };
  const Client = Reflect.get(pool, 'Client') as unknown;
  const stand = Object.create(
    typeof Client === 'function' ? (Client.prototype as object | null) : Object.prototype,
  ) as object;
  const db = new Proxy(stand, {
    get(target, property) {
      if (property === 'release') return () => {};
      if (property === 'query') {
        return (...args: unknown[]) => {
          if (!open) return inTurn(Promise.reject(refused()), undefined, args).result;
          begun ??= connectAndBegin().catch((error: unknown) => ({ error: asOpenFailure(key, error) }));
          const started = Promise.all([begun, queue]).then(([failed]) => {
            if (failed) throw failed.error;
            if (rolledBack) throw refused();
            return client!;
          });
          const { result, done } = inTurn(
            started,
            (taken) => taken.query.bind(taken) as (...a: unknown[]) => unknown,
            args,
          );
          queue = done;
          return result;
        };
      }
      const holder = client ?? target;
      const value: unknown = Reflect.get(holder, property, holder);
      return typeof value === 'function' ? (value as () => unknown).bind(holder) : value;
    },
  }) as unknown;
  return {
    db,
    get opened() {
      return begun !== undefined;
    },
    async commit() {
      if (!open) throw refused();
      open = false;
      committing = true;
      if (begun === undefined) {
        finish(false);
        return markWithout();
      }
      try {
        const failed = await begun;
        if (failed) throw failed.error;
        await queue; // every query a listener made, awaited or not, lands before the mark
        if (ended) throw refused(); // abandoned meanwhile (the commit timed out): its connection is closed
        if (broken !== undefined) {
          throw new StoreError(
            `the connection of the delivery transaction of ${key} failed: ${messageOf(broken)}`,
            { cause: broken },
          );
        }
        const taken = client!;
        const andCommit = mark.andCommit();
        if (andCommit !== undefined) {
          const lost = await taken.query(andCommit).then(
            () => false,
            (error: unknown) => {
              if (Reflect.get(Object(error), 'code') === LEASE_LOST) return true;
              throw error;
            },
          );
          if (lost) await taken.query('ROLLBACK'); // the COMMIT was skipped with the failed mark
          finish(false);
          return !lost;
        }
        const { rowCount } = await taken.query(...mark.statement);
        if (rowCount !== 1) {
          // The lease was lost: another attempt holds the entry now. The listeners' writes must not land.
          await taken.query('ROLLBACK');
          finish(false);
          return false;
        }
        await taken.query('COMMIT');
        finish(false);
        return true;
      } catch (error) {
        finish(true); // both or neither: the database rolls back what did not commit
        throw error;
      }
    },
    async rollback(abandon = false) {
      open = false;
      rolledBack = true;
      if (ended || (committing && !abandon)) return; // a commit under way ends it itself
      if (!client || abandon) return finish(abandon);
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
 * What a listener's query through `db` rejects with when the transaction could not be opened (no client from
 * the pool, a failed `BEGIN`): a `StoreError` whose cause is the driver's. A refusal (the attempt ended) and
 * a wrong pool (`TypeError`, a programmer error) are passed on as they are.
 */
function asOpenFailure(key: string, error: unknown): unknown {
  if (error instanceof IpnKitError || error instanceof TypeError) return error;
  return new StoreError(
    `could not open the delivery transaction of ${key}: ${messageOf(error)} (is the pool exhausted, or the ` +
      'database unreachable? the attempt is retried)',
    { cause: error },
  );
}

/** `on` or `removeListener` of an event emitter, as a pool's client has them. */
type Listening = (this: unknown, event: string, listener: (error: unknown) => void) => unknown;

/**
 * Runs a query on the client `started` resolves (once BEGIN has answered and the previous query of the
 * transaction has settled: the listeners run concurrently, and pg wants one query at a time on a client),
 * or refuses it with the error `started` rejects with. `result` has the shape pg gives for the way it was
 * called: a promise (marked handled when refused, so that a query nobody awaits never crashes the process);
 * `undefined` for the callback forms (`query(text, values, callback)` or a config with a `callback`), the
 * callback getting the refusal; the submittable itself (a cursor, a stream), told through `handleError`.
 * `done` settles when the query has.
 */
function inTurn<C>(
  started: Promise<C>,
  queryOf: ((client: C) => (...args: unknown[]) => unknown) | undefined,
  args: unknown[],
): { result: unknown; done: Promise<unknown> } {
  const run = (client: C, runArgs: unknown[]): unknown => Reflect.apply(queryOf!(client), undefined, runArgs);
  const first = Object(args[0]) as { submit?: unknown; handleError?: unknown; callback?: unknown };
  const last = args[args.length - 1];
  if (typeof first.submit === 'function') {
    // pg queues a submittable behind it: the next query waits for none of it but its sending.
    const done = started.then(
      (client) => run(client, args),
      (error: unknown) => {
        if (typeof first.handleError === 'function') Reflect.apply(first.handleError, first, [error]);
      },
    );
    return { result: first, done };
  }
  const callback = typeof last === 'function' ? last : first.callback;
  if (typeof callback === 'function') {
    const done = started.then(
      (client) =>
        new Promise<void>((resolve) => {
          const answered = (...answer: unknown[]): void => {
            resolve();
            Reflect.apply(callback, undefined, answer);
          };
          run(
            client,
            typeof last === 'function'
              ? [...args.slice(0, -1), answered]
              : [{ ...first, callback: answered }],
          );
        }),
      (error: unknown) => void Reflect.apply(callback, undefined, [error]),
    );
    return { result: undefined, done };
  }
  const result = started.then((client) => run(client, args));
  result.catch(() => {}); // handled here; whoever awaits it still gets the rejection
  return { result, done: result.catch(() => {}) };
}
