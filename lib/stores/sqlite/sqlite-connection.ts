import { DeliveryError, messageOf } from '../../shared/errors.js';
import { splitStatements } from '../postgres/postgres-transaction.js';
import type { Statement, StatementResult, Transactions } from '../transactions.js';

/**
 * One prepared statement: the part of better-sqlite3's `Statement` (and `node:sqlite`'s `StatementSync`)
 * the store uses, with `?` placeholders bound in order.
 */
export interface SqliteStatement {
  /** Runs a statement that writes: how many rows it changed. */
  run(...values: any[]): { changes: number | bigint }; // eslint-disable-line @typescript-eslint/no-explicit-any
  /** Runs a statement that returns rows (a `SELECT`, or a write with `RETURNING`): all of them. */
  all(...values: any[]): unknown[]; // eslint-disable-line @typescript-eslint/no-explicit-any
}

/**
 * The part of a better-sqlite3 `Database` (or a `node:sqlite` `DatabaseSync`) the store uses: synchronous
 * `prepare` and `exec`. Declared here so that ipn-kit's types never name the driver's package.
 */
export interface SqliteDatabase {
  /** Compiles one statement. */
  prepare(sql: string): SqliteStatement;
  /** Runs one or more statements without values. */
  exec(sql: string): unknown;
  /** Closes the connection. */
  close(): unknown;
}

/** Each connection's prepared statements, by text: compiling is the costly part of a small statement. */
const prepared = new WeakMap<SqliteDatabase, Map<string, SqliteStatement>>();

/** `text` prepared on `database`, once per connection. */
export function statementOf(database: SqliteDatabase, text: string): SqliteStatement {
  let cache = prepared.get(database);
  if (cache === undefined) prepared.set(database, (cache = new Map<string, SqliteStatement>()));
  let statement = cache.get(text);
  if (statement === undefined) cache.set(text, (statement = database.prepare(text)));
  return statement;
}

/**
 * Sets the pragmas every connection of the store needs: WAL, then a busy timeout of 0. better-sqlite3 (and
 * `node:sqlite`) is synchronous: SQLite's own busy timeout would wait for another process's write lock
 * inside the call, the whole event loop with it. The store waits with timers instead ({@link whenNotBusy}).
 * Only switching the file to WAL, once, in the constructor, waits inside SQLite (up to `busyTimeoutMs`).
 */
export function configure(database: SqliteDatabase, busyTimeoutMs: number): void {
  database.exec(`PRAGMA busy_timeout = ${Math.floor(busyTimeoutMs)}`);
  // Readers never wait for the writer, and a writer's commit is one append: several processes on one file.
  database.exec('PRAGMA journal_mode = WAL');
  database.exec('PRAGMA busy_timeout = 0');
}

/** Whether `error` is SQLite's SQLITE_BUSY (any extended code): another connection holds the lock. */
export function isBusy(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const code: unknown = Reflect.get(error, 'code'); // better-sqlite3: 'SQLITE_BUSY', 'SQLITE_BUSY_SNAPSHOT'
  const errcode: unknown = Reflect.get(error, 'errcode'); // Node's node:sqlite: 5, 517, ...
  if (typeof code === 'string' && code.startsWith('SQLITE_BUSY')) return true;
  if (typeof errcode === 'number') return (errcode & 0xff) === 5;
  // Deno's node:sqlite: code 'ERR_SQLITE_ERROR' alone, and SQLITE_BUSY's own message (SQLITE_LOCKED's is
  // "database table is locked").
  return /^database is locked\b/.test(messageOf(error));
}

/** SQLite's own busy handler's steps (ms), then its last, until the deadline. */
const BACKOFF_MS = [1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100];

/**
 * Runs `work` (synchronous statements that change nothing when SQLite answers SQLITE_BUSY: one statement
 * in autocommit, a `BEGIN IMMEDIATE`, a `COMMIT`) and, while it fails with SQLITE_BUSY, again after a timer,
 * backing off, until `timeoutMs` has passed since the first try; then rejects with the last SQLITE_BUSY.
 * The event loop runs meanwhile, unlike in SQLite's busy timeout. Any other failure rejects at once.
 */
export async function whenNotBusy<T>(work: () => T, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (let tries = 0; ; tries += 1) {
    try {
      return work();
    } catch (error) {
      const left = deadline - Date.now();
      if (!isBusy(error) || left <= 0) throw error;
      const wait = Math.min(BACKOFF_MS[Math.min(tries, BACKOFF_MS.length - 1)]!, left);
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }
}

/**
 * Who writes through the store's connection now. better-sqlite3 is synchronous, so each statement runs
 * whole in one turn of the event loop; only a delivery transaction spans turns (its listeners await). While
 * one is open on its own connection, it holds the file's write lock: a write on the store's connection
 * would wait for it synchronously (the busy timeout), blocking the very event loop that must finish it.
 * So the store's writes and its delivery transactions take turns here, first come first served, and a
 * write waits asynchronously, never inside SQLite.
 */
export interface WriteGate {
  /** Runs `work` once no delivery transaction of this store is open. */
  run<T>(work: () => T | PromiseLike<T>): Promise<T>;
  /** Resolves once the gate is this caller's alone; it holds it until it calls the release it got. */
  hold(): Promise<() => void>;
}

export function createWriteGate(): WriteGate {
  let tail: Promise<unknown> = Promise.resolve();
  return {
    run(work) {
      const result = tail.then(work);
      tail = result.catch(() => {});
      return result;
    },
    hold() {
      let release!: () => void;
      const released = new Promise<void>((resolve) => (release = resolve));
      const acquired = tail.then(() => release);
      tail = acquired.then(() => released);
      return acquired;
    },
  };
}

/** Runs one statement on `database`: rows for a `rows` statement, the rows changed for a `count` one. */
export function runStatement(
  database: SqliteDatabase,
  { text, values, returns }: Statement,
): StatementResult {
  const statement = statementOf(database, text);
  if (returns === 'rows') {
    const rows = statement.all(...values) as Array<Record<string, unknown>>;
    return { rows, count: rows.length };
  }
  return { rows: [], count: Number(statement.run(...values).changes) };
}

/**
 * Delivery transactions on a connection of their own (`connection()` hands it out, opening it when it has
 * none), one at a time per store (`gate`): `BEGIN IMMEDIATE` takes the file's write lock at once (waiting
 * for another process's up to the busy timeout), so the listeners' writes and the mark never meet another
 * writer's snapshot. Listeners get that connection, as better-sqlite3 types it, as `tx` and `db`; a
 * transaction of their own inside (`db.transaction(fn)`) is a savepoint, as better-sqlite3 makes it.
 */
export function connectionTransactions<D extends SqliteDatabase>(
  connection: () => D,
  gate: WriteGate,
  busyTimeoutMs: number,
): Transactions<D> & { abandon(until?: Promise<unknown>): void } {
  /** The open transaction's turn: released when it ends, or earlier when it is abandoned. */
  let current: { release: () => void; until?: Promise<unknown> } | undefined;
  return {
    name: 'SQLite',
    async transaction(work) {
      const turn = { release: await gate.hold() } as { release: () => void; until?: Promise<unknown> };
      current = turn;
      try {
        const db = connection();
        // Another process's write lock: waited for on timers. A BEGIN that failed opened nothing (the
        // quiet ROLLBACK makes sure), so it is tried again whole.
        await whenNotBusy(() => {
          try {
            db.exec('BEGIN IMMEDIATE');
          } catch (error) {
            if (isBusy(error)) rollbackQuietly(db);
            throw error;
          }
        }, busyTimeoutMs);
        try {
          // Statements inside the transaction (the listeners', the mark) are not retried: SQLITE_BUSY in
          // the middle of a transaction may have rolled all of it back, and a retried mark would then run
          // on its own. Holding the write lock from BEGIN IMMEDIATE, in WAL, they do not meet it; if one
          // does, the attempt fails and rolls back whole, and is retried later.
          const result = await work(guarded(db));
          // A COMMIT that fails with SQLITE_BUSY (readers in a rollback journal, if WAL could not be set)
          // leaves the transaction open, whole: it can be tried again.
          await whenNotBusy(() => db.exec('COMMIT'), busyTimeoutMs);
          return result;
        } catch (error) {
          rollbackQuietly(db);
          throw error;
        }
      } finally {
        if (current === turn) current = undefined;
        // An abandoned attempt whose transaction could not end yet keeps the turn until it has.
        if (turn.until === undefined) turn.release();
        else void turn.until.then(turn.release, turn.release);
      }
    },
    query: (tx, statement) => Promise.resolve().then(() => runStatement(unguarded.get(tx) ?? tx, statement)),
    /**
     * Ends the open transaction's turn although its listeners still run (they were abandoned). Without
     * `until`, the caller has ended the transaction already (closed its connection, or rolled it back and
     * made it read-only), so no late write of theirs lands: the turn goes now, and the store's writes need
     * not wait for listeners that may never settle. With `until`, the transaction could not end (a
     * listener's statement still runs on the connection): the turn goes once `until` settles, the caller
     * having ended the transaction by then; the store's writes wait for it in the gate, not inside SQLite.
     */
    abandon(until) {
      if (current === undefined) return;
      if (until === undefined) current.release();
      else current.until = until;
      current = undefined;
    },
  };
}

/**
 * Ends the transaction open on `database` while a listener's statement still runs on it (an open iterator:
 * the connection cannot close): makes the connection read-only (`PRAGMA query_only`), so that no late write
 * of the abandoned listeners lands, even through a statement they prepared earlier, then rolls back, which
 * releases the file's write lock now. better-sqlite3 refuses any statement while an iterator is open, unless
 * in unsafe mode: this connection is turned to it, as it is never used again. `false` when the driver
 * refused either statement: the transaction is still open.
 */
export function endUnderIterator(database: SqliteDatabase): boolean {
  const unsafeMode: unknown = Reflect.get(database, 'unsafeMode');
  try {
    if (typeof unsafeMode === 'function') unsafeMode.call(database, true);
    database.exec('PRAGMA query_only = ON');
    database.exec('ROLLBACK');
    return true;
  } catch {
    return false;
  }
}

/** Each guarded connection's own: the mark runs on it, with its prepared statements. */
const unguarded = new WeakMap<object, SqliteDatabase>();

/**
 * A statement that ends or starts the transaction itself (`COMMIT`, `END`, `ROLLBACK`, `BEGIN`), not a
 * savepoint's `ROLLBACK TO`: sent by a listener, it would commit its writes before the mark (a failure
 * after it then credits the payment again), or roll back what it wrote earlier.
 */
const CONTROL = /^(?:begin|commit|end|rollback(?!\s+(?:transaction\s+)?to\b))\b/i;

/**
 * The delivery's connection as listeners get it: its `exec` and `prepare` refuse a statement that would end
 * the delivery's transaction (see {@link CONTROL}), and its `close` does nothing (the store closes it);
 * everything else is the connection's own, bound to it, so
 * `db.transaction(fn)` (which prepares its BEGIN and SAVEPOINT on the connection itself) still nests as a
 * savepoint.
 */
function guarded<D extends SqliteDatabase>(database: D): D {
  const check = (text: unknown): void => {
    if (typeof text !== 'string') return;
    const control = splitStatements(text)
      .map((statement) => statement.replace(/^(?:\s+|\/\*[\s\S]*?\*\/|--[^\n]*)*/, ''))
      .find((statement) => CONTROL.test(statement));
    if (control === undefined) return;
    throw new DeliveryError(
      `a listener sent "${control.trim().split(/\s+/).slice(0, 2).join(' ')}" on db, inside the delivery ` +
        'transaction: ipn-kit begins and commits it itself, so that your writes and the delivered mark land ' +
        'together. It was not run: write without it, or use db.transaction(fn), which is a savepoint here',
    );
  };
  const proxy = new Proxy(database, {
    get(target, property) {
      const value: unknown = Reflect.get(target, property, target);
      if (typeof value !== 'function') return value;
      // The store closes it: a listener's close would leave the store a closed connection for every later
      // attempt.
      if (property === 'close') return () => proxy;
      if (property === 'exec' || property === 'prepare') {
        return (text: unknown, ...rest: unknown[]) => {
          check(text);
          return Reflect.apply(value, target, [text, ...rest]) as unknown;
        };
      }
      return (value as () => unknown).bind(target);
    },
  });
  unguarded.set(proxy, database);
  return proxy;
}

/** Rolls back what is open on `database`: nothing when a failed COMMIT or a close already did. */
function rollbackQuietly(database: SqliteDatabase): void {
  try {
    database.exec('ROLLBACK');
  } catch {
    // "no transaction is active", or the connection was closed (an abandoned attempt): nothing to undo
  }
}

/** Closes `database`, whatever it says: it is the store's no longer. */
export function closeQuietly(database: SqliteDatabase): void {
  try {
    database.close();
  } catch {
    // already closed, or still busy (a listener that settled with its iterator open): the GC finalizes it
  }
}
