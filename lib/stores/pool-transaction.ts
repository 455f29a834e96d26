import { LateWriteError } from './late-write.js';
import { openOrmTransaction } from './orm-transaction.js';
import type { DeliveryTransaction } from './store.js';
import type { Statement, StatementResult, Transactions } from './transactions.js';
import { DeliveryError, IpnKitError, messageOf, StoreError } from '../shared/errors.js';

/** Where one delivery attempt's connection stands. */
export interface Held<C> {
  /** Taken from the pool and the transaction begun: set at a listener's first query. */
  opening?: Promise<C>;
  connection?: C;
  /** The mark is on its way: a listener's query from now on is refused. */
  marking: boolean;
  /** Committed, rolled back or abandoned: every query is refused. */
  ended: boolean;
  /** The mark committed too (one round trip): no `COMMIT` after it. */
  committed?: boolean;
  /** A query failed in a way that ended the transaction on the server (a deadlock): the commit must fail. */
  broken?: unknown;
  /** What the connection emitted as `error` (the server ended it): the commit fails, the connection is closed. */
  failed?: unknown;
  /** Keeps that `error` (listening on the connection while the attempt holds it). */
  onError: (error: unknown) => void;
  /** The listeners' queries in promise form (see `unobserved`). */
  watched: Array<Watched<unknown>>;
  /** The mark has looked for unobserved failures: a query refused from now on is a late write. */
  checked?: boolean;
  /** Where a late write that nothing awaited is told of (the router's `error` event; see `lateWrite`). */
  report?: (error: IpnKitError) => void;
  /**
   * Settles once the last query a listener made has: each runs only once the one before it has answered,
   * so that none is sent after the transaction failed, and the mark comes after all of them.
   */
  queue: Promise<unknown>;
}

/** A listener's query as sent: what the call returns (in the form it was made), and when it has settled. */
export interface Sent {
  result: unknown;
  done: Promise<unknown>;
}

/** What a store gives {@link openPoolTransaction}: how its pool's connections are taken, used and given back. */
export interface PoolSide<C> {
  /** The database's name, for messages: `'PostgreSQL'`, `'MySQL'`. */
  readonly name: string;
  /** Takes a connection of the pool (a `TypeError` for a pool that hands out no usable one). */
  take(): Promise<C>;
  /** The statement that begins the transaction. */
  readonly begin: string;
  /** Runs one of ipn-kit's own statements (`begin`, `COMMIT`, `ROLLBACK`) on `connection`. */
  run(connection: C, text: string): Promise<unknown>;
  /**
   * A listener's query arguments as they run inside the delivery's transaction (its `BEGIN`, `COMMIT` and
   * `ROLLBACK` as savepoints); throws the refusal of a statement that cannot run there.
   */
  inside(args: unknown[]): unknown[];
  /**
   * Sends a listener's query (`method` with `args`) on the connection `started` resolves, or refuses it with
   * what `started` rejects with, in the form the listener made it.
   */
  send(started: Promise<C>, method: string, args: unknown[], held: Held<C>): Sent;
  /** Runs the mark on `connection`, or without one (no listener queried `db`). `committed`: it committed too. */
  mark(connection: C | undefined, statement: Statement): Promise<StatementResult & { committed?: boolean }>;
  /** Gives back to the pool a connection whose transaction has ended. */
  giveBack(connection: C): Promise<void> | void;
  /** Closes the connection (the server rolls back whatever it held). */
  destroy(connection: C): void;
  /** What `db` is an object of before its first query (`instanceof` holds): a client class's prototype. */
  readonly prototype?: object | null;
  /** Whose members `db` offers before its first query (by default, an object of {@link prototype}). */
  readonly before?: object;
  /** A member of `db` of the store's own, given how to send a query through it; `undefined` for any other. */
  member?(property: PropertyKey, send: (method: string, args: unknown[]) => unknown): unknown;
}

/**
 * Opens the delivery transaction of `key` on a connection of a store's pool, through
 * {@link openOrmTransaction} (the pool stands for an ORM): listeners get a guarded connection as `tx` and
 * `db`, and the mark runs in the same transaction. The connection is taken lazily, at a listener's first
 * query, which begins the transaction: an attempt whose listeners never query `db` holds none, and its
 * mark runs without one (the state stays `idle`).
 *
 * The guarded connection runs listeners' queries one at a time, in the order made, and the mark after all
 * of them; maps their `BEGIN`, `COMMIT` and `ROLLBACK` to savepoints (see `side.inside`); refuses every
 * query once the mark is on its way or the attempt has ended (a listener that outlives its attempt never
 * writes outside it), in the form it was made; and its `release()` does nothing (ipn-kit gives the
 * connection back). An abandoned attempt's connection is closed at once, which rolls back on the server
 * whatever its listeners still do. An `error` the connection emits meanwhile is kept, fails the commit
 * (the connection is closed), and never reaches the process.
 */
export async function openPoolTransaction<C extends object>(
  side: PoolSide<C>,
  key: string,
  mark: Statement,
  explain: (error: unknown) => string | undefined,
): Promise<DeliveryTransaction<unknown, unknown>> {
  const held: Held<C> = {
    marking: false,
    ended: false,
    queue: Promise.resolve(),
    onError: (error) => void (held.failed ??= error),
    watched: [],
  };
  const db = guarded(side, held, key);
  const transactions: Transactions<object> = {
    name: side.name,
    async transaction<T>(work: (tx: object) => Promise<T>): Promise<T> {
      try {
        const result = await work(db);
        held.ended = true;
        const connection = held.opening && (await held.opening);
        if (connection && !held.committed) {
          // Closed meanwhile (abandoned while the mark ran): nothing committed, and delivered is not said.
          if (held.connection !== connection) throw new LateWriteError(key);
          await side.run(connection, 'COMMIT');
        }
        await finish(side, held, false);
        return result;
      } catch (error) {
        held.ended = true;
        await close(side, held);
        throw error;
      }
    },
    async query(_tx, statement) {
      held.marking = true;
      await held.queue; // every query a listener made, awaited or not, has answered
      if (held.ended) throw new LateWriteError(key); // abandoned meanwhile (the commit timed out)
      if (held.failed !== undefined) {
        throw new StoreError(
          `the connection of the delivery transaction of ${key} failed: ${messageOf(held.failed)}`,
          { cause: held.failed },
        );
      }
      if (held.broken !== undefined) throw rolledBack(key, held.broken);
      await Promise.all(held.watched.map(({ settled }) => settled));
      const missed = uncaught(held.watched);
      held.checked = true;
      if (missed) throw unobserved(key, missed.error);
      // No listener query opened a connection: nothing to make atomic, the mark runs without one.
      const { committed, ...result } = await side.mark(held.opening && (await held.opening), statement);
      held.committed = committed;
      return result;
    },
  };
  const opened = await openOrmTransaction(transactions, key, mark, { explain });
  return {
    tx: db,
    db,
    get state() {
      return opened.state === 'open' && held.opening === undefined ? 'idle' : opened.state;
    },
    onLateWrite(report) {
      held.report = report;
    },
    async commit() {
      try {
        return await opened.commit();
      } catch (error) {
        // The store's own failure (the mark without a connection, a failed connection) as it is.
        const cause: unknown = Reflect.get(Object(error), 'cause');
        throw cause instanceof IpnKitError ? cause : error;
      }
    },
    rollback(listeners) {
      if (listeners !== undefined) {
        held.ended = true; // abandoned: its connection is closed, the server rolls it back
        void finish(side, held, true);
      }
      return opened.rollback(listeners);
    },
  };
}

/** After a deadlock the server has rolled the transaction back, and a statement sent now would commit alone. */
function rolledBack(key: string, broken: unknown): DeliveryError {
  return new DeliveryError(
    `the delivery transaction of ${key} was rolled back by the database (${messageOf(broken)}): this ` +
      'write was not made; a listener that catches that error cannot go on in the transaction: let it throw, ' +
      'and the attempt is retried',
    { cause: broken },
  );
}

/**
 * A listener's query that failed while nothing awaited it (a `db.query(...)` without `await`): MySQL goes on
 * in the transaction after a failed statement, and would commit the listener's other writes and the mark
 * without this one (PostgreSQL aborts the transaction, and the mark fails). The attempt fails instead.
 */
function unobserved(key: string, error: unknown): DeliveryError {
  return new DeliveryError(
    `a query a listener made through db failed, and nothing awaited it: ${messageOf(error)}. The delivery ` +
      `transaction of ${key} is rolled back and the attempt retried: await every query made through tx or db`,
    { cause: error },
  );
}

/**
 * A write through db refused because its attempt had ended, that nothing awaited a turn of the event loop
 * later: it never ran, and this is all that tells of it.
 */
function lateWrite(key: string, error: unknown): DeliveryError {
  return new DeliveryError(
    `a query a listener made through db after the delivery of ${key} ended was not run, and nothing ` +
      `awaited it: ${messageOf(error)}`,
    { cause: error },
  );
}

/** A failure of what a listener chained on a query through db (`.then(f)`, `.finally(f)`) after the mark looked. */
function afterMark(key: string, error: unknown): DeliveryError {
  return new DeliveryError(
    `a promise a listener chained on a query through db (.then or .finally) failed after the delivery of ${key} ` +
      `was marked, and nothing awaited it: ${messageOf(error)}`,
    { cause: error },
  );
}

/**
 * A listener's query in promise form, or a promise derived from one, that knows whether its failure is
 * observed: a rejection handler attached to it (`await`, `.catch`, `.then(_, onRejected)`), or to what it
 * handed its failure on to (`.then(f)` and `.finally(f)` derive watched promises in turn). `await` reads
 * `then` of a promise of a subclass (of a plain `Promise` it does not). Its failure is kept and marked
 * handled (never an unhandled rejection).
 */
class Watched<T> extends Promise<T> {
  static override get [Symbol.species](): PromiseConstructor {
    return Promise;
  }

  /** A rejection handler was attached to it. */
  observed = false;
  failure?: { error: unknown };
  /** Settles once it has; never rejects (set by {@link watched}). */
  settled!: Promise<void>;
  /** What `.then(f)` and `.finally(f)` derived from it: its failure travels on in them. */
  readonly derived: Array<Watched<unknown>> = [];
  /** Told when one it derived fails (see {@link watch}); handed on to what that derives in turn. */
  onDerivedFailure?: (failed: Watched<unknown>) => void;

  /** Its failure reaches a rejection handler, here or through what it derived. */
  get caught(): boolean {
    return this.observed || this.derived.some((each) => each.caught);
  }

  override then<A = T, B = never>(
    onFulfilled?: ((value: T) => A | PromiseLike<A>) | null,
    onRejected?: ((reason: unknown) => B | PromiseLike<B>) | null,
  ): Promise<A | B> {
    const derived = super.then(onFulfilled, onRejected);
    if (typeof onRejected !== 'function') return this.handOn(derived);
    this.observed = true;
    return derived;
  }

  override finally(onFinally?: (() => void) | null): Promise<T> {
    // Not through `then`, which `finally` calls with a rejection handler of its own that observes nothing.
    return this.handOn((Promise.prototype.then.call(this) as Promise<T>).finally(onFinally));
  }

  private handOn<U>(derived: Promise<U>): Watched<U> {
    // Told only of a failure of its own (`f` threw, or returned a refused write): one handed on from here is
    // this one's, which the mark or `watch` tells of.
    const next = watched(derived, (failed) => {
      if (this.failure?.error !== failed.failure?.error) this.onDerivedFailure?.(failed);
    });
    next.onDerivedFailure = this.onDerivedFailure;
    this.derived.push(next);
    return next;
  }
}

/** `promise` as a {@link Watched} one; `failed` is told when it fails. */
function watched<T>(promise: Promise<T>, failed?: (query: Watched<unknown>) => void): Watched<T> {
  const query = new Watched<T>((resolve, reject) => void promise.then(resolve, reject));
  query.settled = Promise.prototype.then.call(query, undefined, (error: unknown) => {
    query.failure = { error };
    failed?.(query);
  }) as Promise<void>;
  return query;
}

/**
 * The first failure among `queries` and what they derived that reaches no rejection handler. One derived
 * that has not settled (a `finally` callback still running) is not waited for: its query's failure is
 * unobserved until something observes the derived one.
 */
function uncaught(queries: Array<Watched<unknown>>): { error: unknown } | undefined {
  for (const query of queries) {
    const missed = query.failure && !query.caught ? query.failure : uncaught(query.derived);
    if (missed) return missed;
  }
  return undefined;
}

/**
 * `result` as the listener gets it: a promise becomes a {@link Watched} one, kept in `held` for the mark;
 * one refused `late` (after the mark looked) is reported instead when nothing observed its failure a turn
 * of the event loop later. A callback or a submittable form is left as it is (its callback or its `error`
 * event hears the failure).
 */
function watch<C>(held: Held<C>, result: unknown, key: string, late?: string): unknown {
  if (!(result instanceof Promise)) return result;
  const query = watched(result as Promise<unknown>);
  // What `.then(f)` and `.finally(f)` derived may settle after the mark looked (it waits for none of them),
  // and is marked handled: a write `f` made then was refused, and its refusal travels on in it (told as a
  // late write); or `f` threw once the attempt was marked (told as that). Either when nothing observes it a
  // turn later. After an attempt that ended unmarked, only a refused write: its own failure is told already.
  query.onDerivedFailure = (failed) => {
    const error = failed.failure?.error;
    const late = refused(error);
    if (!(held.checked || (held.ended && late))) return;
    setTimeout(() => {
      if (!failed.caught) held.report?.(late ? lateWrite(key, error) : afterMark(key, error));
    });
  };
  if (late === undefined) held.watched.push(query);
  else
    void query.settled.then(() =>
      setTimeout(() => {
        if (query.failure && !query.caught) held.report?.(lateWrite(late, query.failure.error));
      }),
    );
  return query;
}

/** Whether `error` is a write refused because its attempt had ended (or wraps one, as a listener may). */
function refused(error: unknown): boolean {
  let current = error;
  for (let depth = 0; depth < 5 && typeof current === 'object' && current !== null; depth += 1) {
    if (current instanceof LateWriteError) return true;
    current = Reflect.get(current, 'cause');
  }
  return false;
}

/** The connection listeners get (see {@link openPoolTransaction}). */
function guarded<C extends object>(side: PoolSide<C>, held: Held<C>, key: string): object {
  const target = Object.create(side.prototype === undefined ? Object.prototype : side.prototype) as object;
  const before = side.before ?? target;
  /** The connection for a query whose turn has come. */
  const start = (): Promise<C> => {
    if (held.ended) return Promise.reject(new LateWriteError(key)); // abandoned while it waited its turn
    if (held.broken !== undefined) return Promise.reject(rolledBack(key, held.broken));
    return held.opening!.then((connection) => {
      if (held.ended || held.connection !== connection) throw new LateWriteError(key);
      if (held.broken !== undefined) throw rolledBack(key, held.broken);
      return connection;
    });
  };
  const send = (method: string, args: unknown[]): unknown => {
    const refuse = (refusal: Error, late?: string) =>
      watch(held, side.send(Promise.reject(refusal), method, args, held).result, key, late);
    if (held.ended || held.marking) {
      return refuse(new LateWriteError(key), held.ended || held.checked ? key : undefined);
    }
    let mapped: unknown[];
    try {
      mapped = side.inside(args);
    } catch (refusal) {
      return refuse(refusal as Error);
    }
    held.opening ??= open(side, held, key);
    held.opening.catch(() => {}); // each query made gets the failure
    const sent = side.send(held.queue.then(start), method, mapped, held);
    held.queue = sent.done.catch(() => {});
    return watch(held, sent.result, key);
  };
  return new Proxy(target, {
    get(_target, property) {
      if (property === 'query') return (...args: unknown[]) => send('query', args);
      const own = side.member?.(property, send);
      if (own !== undefined) return own;
      if (property === 'release') return () => {};
      const holder = held.connection ?? before;
      const value: unknown = Reflect.get(holder, property, holder);
      return typeof value === 'function' ? (value as () => unknown).bind(holder) : value;
    },
  });
}

/** `on` or `removeListener` of an event emitter, as a pool's connection has them. */
type Listening = (this: unknown, event: string, listener: (error: unknown) => void) => unknown;

/** Takes a connection and begins; the opening failure as a `StoreError` naming the likely cause. */
async function open<C extends object>(side: PoolSide<C>, held: Held<C>, key: string): Promise<C> {
  let connection: C;
  try {
    connection = await side.take();
  } catch (error) {
    if (error instanceof IpnKitError || error instanceof TypeError) throw error;
    throw new StoreError(
      `could not open the delivery transaction of ${key}: ${messageOf(error)} (is the pool exhausted, or the ` +
        'database unreachable? the attempt is retried)',
      { cause: error },
    );
  }
  if (held.ended) {
    await side.giveBack(connection); // the attempt ended while the pool was handing it out
    throw new LateWriteError(key);
  }
  held.connection = connection;
  (Reflect.get(connection, 'on') as Listening | undefined)?.call(connection, 'error', held.onError);
  try {
    await side.run(connection, side.begin);
  } catch (error) {
    await finish(side, held, true);
    throw new StoreError(`could not begin the delivery transaction of ${key}: ${messageOf(error)}`, {
      cause: error,
    });
  }
  return connection;
}

/**
 * Ends the attempt's hold on its connection, once: gives it back to the pool, or closes it (`destroy`, or
 * its connection failed), which rolls back whatever was open.
 */
async function finish<C extends object>(side: PoolSide<C>, held: Held<C>, destroy: boolean): Promise<void> {
  const connection = held.connection;
  held.connection = undefined;
  if (!connection) return;
  (Reflect.get(connection, 'removeListener') as Listening | undefined)?.call(
    connection,
    'error',
    held.onError,
  );
  if (destroy || held.failed !== undefined) side.destroy(connection);
  else await side.giveBack(connection);
}

/**
 * Rolls back and gives the connection back, or closes it when that fails (or it was abandoned). Waits for
 * no connection the pool has not handed out yet (an exhausted pool, a `connect()` that hangs): the attempt
 * has ended, and `open` gives that one back as it comes.
 */
async function close<C extends object>(side: PoolSide<C>, held: Held<C>): Promise<void> {
  const connection = held.connection;
  if (!connection) return; // none taken yet, or closed already
  await held.opening?.catch(() => undefined); // its BEGIN has answered (one that failed closed it)
  if (held.connection !== connection) return; // closed meanwhile
  if (held.failed !== undefined) return finish(side, held, true);
  const rolled = await side.run(connection, 'ROLLBACK').then(
    () => true,
    () => false,
  );
  await finish(side, held, !rolled);
}
