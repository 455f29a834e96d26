import { randomBytes } from 'node:crypto';
import { LateWriteError, unguarded } from '../late-write.js';
import { asSavepoint, splitStatements } from '../postgres/postgres-transaction.js';
import { openOrmTransaction, type Run } from '../orm-transaction.js';
import type { DeliveryTransaction } from '../store.js';
import { mysqlOrmSql } from './mysql-sql.js';
import type { Statement, StatementResult, Transactions } from '../transactions.js';
import { DeliveryError, IpnKitError, messageOf, StoreError } from '../../shared/errors.js';
import {
  affectedOf,
  DEADLOCK,
  errnoOf,
  LOCK_WAIT_TIMEOUT,
  NO_SUCH_SAVEPOINT,
  rowsOf,
  type MysqlPool,
  type MysqlPoolConnection,
  type MysqlQueryResult,
} from './mysql-pool.js';

/** Where one delivery attempt's connection stands. */
interface Held {
  /** Taken from the pool and `START TRANSACTION` sent: set at a listener's first query. */
  opening?: Promise<MysqlPoolConnection>;
  connection?: MysqlPoolConnection;
  /** The mark is on its way: a listener's query from now on is refused. */
  marking: boolean;
  /** Committed, rolled back or abandoned: every query is refused. */
  ended: boolean;
  /** A query failed in a way that ended the transaction on the server (a deadlock): the commit must fail. */
  broken?: unknown;
  /** `BEGIN`s a listener sent through `db`, open as savepoints. */
  savepoints: number;
  /**
   * Settles once the last query a listener made has: each runs only once the one before it has answered,
   * so that none is sent after a deadlock ended the transaction, and the mark comes after all of them.
   */
  queue: Promise<unknown>;
}

const helds = new WeakMap<object, Held>();

/**
 * Opens the delivery transaction of `key` on a connection of `pool`, through {@link openOrmTransaction}
 * (the pool stands for an ORM): listeners get a guarded connection as `tx` and `db`, and the mark runs in
 * the same transaction. The connection is taken lazily, at a listener's first query: an attempt whose
 * listeners never query `db` holds none, and its mark runs alone on the pool (the state stays `idle`).
 *
 * The guarded connection refuses every query once the attempt has ended (a listener that outlives its
 * attempt never writes outside it); `release()` and `destroy()` do nothing (ipn-kit gives the connection
 * back); `BEGIN` / `START TRANSACTION`, `COMMIT` and `ROLLBACK` (and `beginTransaction()`, `commit()`,
 * `rollback()`) run as savepoints, since in MySQL a `START TRANSACTION` inside a transaction commits it.
 * Listeners' queries run one at a time, in the order made, and the mark after all of them. A deadlock
 * (InnoDB then rolls the whole transaction back, and later statements would commit on their own) refuses
 * every later query and fails the commit. An abandoned attempt's connection is closed at once,
 * which rolls back on the server whatever its listeners still do. Any other attempt's connection is reset
 * before it goes back to the pool (see `giveBack`): the store's own statements never run under a
 * session a listener changed. The mark runs in that session (it must, to commit with the listeners'
 * writes); it depends on none of it but the database, so `USE` is refused.
 */
export async function openPoolTransaction(
  pool: MysqlPool,
  key: string,
  mark: Statement,
): Promise<DeliveryTransaction<unknown, unknown>> {
  const opened = await openOrmTransaction(poolTransactions(pool, key), key, mark, explainMysql);
  // Its own guarded connection, not the core's guard of it: that refuses a late query in the form it was
  // made (a rejected promise, the callback called), where the core's throws at once.
  const connection = unguarded(opened.tx);
  const held = helds.get(connection as object)!;
  return {
    tx: connection,
    db: connection,
    get state() {
      return opened.state === 'open' && held.opening === undefined ? 'idle' : opened.state;
    },
    commit: () => opened.commit(),
    rollback(listeners) {
      if (listeners !== undefined) abandon(held);
      return opened.rollback(listeners);
    },
  };
}

/** Ends an attempt whose listeners may still run: its connection is closed, the server rolls it back. */
function abandon(held: Held): void {
  held.ended = true;
  const connection = held.connection;
  held.connection = undefined;
  connection?.destroy();
}

/** A `Transactions` over `pool` for one attempt: what {@link openOrmTransaction} runs it through. */
function poolTransactions(pool: MysqlPool, key: string): Transactions<unknown> {
  return {
    name: 'MySQL',
    async transaction<T>(work: (tx: unknown) => Promise<T>): Promise<T> {
      const held: Held = { marking: false, ended: false, savepoints: 0, queue: Promise.resolve() };
      const db = guarded(pool, held, key);
      helds.set(db, held);
      try {
        const result = await work(db);
        held.ended = true;
        const connection = held.opening && (await held.opening);
        if (connection && held.connection) {
          await connection.query('COMMIT');
          held.connection = undefined;
          await giveBack(pool, connection);
        }
        return result;
      } catch (error) {
        held.ended = true;
        await close(pool, held);
        throw error;
      }
    },
    async query(tx: unknown, statement: Statement): Promise<StatementResult> {
      const held = helds.get(tx as object)!;
      held.marking = true;
      await held.queue; // every query a listener made, awaited or not, has answered
      if (held.broken !== undefined) {
        throw new DeliveryError(
          `the transaction of ${key} was rolled back by the database (${messageOf(held.broken)}): a listener ` +
            'that catches this error cannot go on in it; the attempt is retried',
          { cause: held.broken },
        );
      }
      // No listener query opened a connection: nothing to make atomic, the mark runs alone on the pool.
      const result = held.opening
        ? await (await held.opening).query(statement.text, statement.values)
        : await pool.query(statement.text, statement.values);
      const rows = rowsOf(result);
      return { rows, count: statement.returns === 'rows' ? rows.length : affectedOf(result) };
    },
  };
}

/** Rolls back and gives the connection back, or closes it when that fails (or it was abandoned). */
async function close(pool: MysqlPool, held: Held): Promise<void> {
  const connection = await held.opening?.catch(() => undefined);
  if (!connection || held.connection !== connection) return; // none taken, or closed already
  held.connection = undefined;
  await connection.query('ROLLBACK').then(
    () => giveBack(pool, connection),
    () => connection.destroy(),
  );
}

/**
 * Gives back to the pool a connection listeners queried, with none of their session left on it: whatever
 * they set through `db` (`SET sql_mode`, `SET time_zone`, `SET @var`, a temporary table, `PREPARE`) would
 * otherwise stay on the pooled connection, and the store's next statements on it (a receive, a lease
 * pass) and the next delivery would run under it. The reset (`COM_RESET_CONNECTION`, one round trip)
 * puts the session back to the server's global settings, and the connection goes back only once it has
 * answered; a connection whose reset fails is closed. When the reset would undo more than the listeners
 * did, the connection is closed instead, and the pool opens a fresh one: a pool with a `connection`
 * listener (your session setup, run on each new connection only), or a connection without `reset()`.
 * A pool made with mysql2's `resetOnRelease` resets on release itself.
 */
async function giveBack(pool: MysqlPool, connection: MysqlPoolConnection): Promise<void> {
  if (resetsOnRelease(pool)) {
    connection.release();
    return;
  }
  if (typeof connection.reset !== 'function' || setsUpSessions(pool)) {
    connection.destroy();
    return;
  }
  try {
    await connection.reset();
    if (asksIgnoreSpace(connection)) await connection.query(RESTORE_IGNORE_SPACE);
    connection.release();
  } catch {
    connection.destroy();
  }
}

/** mysql2's client flag `IGNORE_SPACE`, on by default: the server adds `IGNORE_SPACE` to the sql_mode at login. */
const IGNORE_SPACE_FLAG = 0x100;

/**
 * Adds `IGNORE_SPACE` back to the session's sql_mode: MariaDB's reset puts the global sql_mode back, without
 * what the server derived from the client's flags at login, and a statement with a space before a function's
 * parenthesis (`COUNT (*)`) would then fail on a reset connection and run on a fresh one.
 */
const RESTORE_IGNORE_SPACE =
  "SET SESSION sql_mode = IF(FIND_IN_SET('IGNORE_SPACE', @@SESSION.sql_mode) > 0, @@SESSION.sql_mode, " +
  "CONCAT_WS(',', NULLIF(@@SESSION.sql_mode, ''), 'IGNORE_SPACE'))";

/** Whether a mysql2 connection logged in with the `IGNORE_SPACE` flag (`connection.config.clientFlags`). */
function asksIgnoreSpace(connection: MysqlPoolConnection): boolean {
  const core: unknown = Reflect.get(connection, 'connection') ?? connection;
  const config: unknown = typeof core === 'object' && core !== null ? Reflect.get(core, 'config') : undefined;
  const flags: unknown =
    typeof config === 'object' && config !== null ? Reflect.get(config, 'clientFlags') : 0;
  return typeof flags === 'number' && (flags & IGNORE_SPACE_FLAG) !== 0;
}

/** Whether `pool` is a mysql2 pool made with `resetOnRelease: true` (its `pool.config`). */
function resetsOnRelease(pool: MysqlPool): boolean {
  const core: unknown = Reflect.get(pool, 'pool');
  const config: unknown = typeof core === 'object' && core !== null ? Reflect.get(core, 'config') : undefined;
  return typeof config === 'object' && config !== null && Reflect.get(config, 'resetOnRelease') === true;
}

/** Whether `pool` (or mysql2's pool under a promise pool) has a `connection` listener: a session setup. */
function setsUpSessions(pool: MysqlPool): boolean {
  const core: unknown = Reflect.get(pool, 'pool');
  return [pool, core].some((each) => {
    const count: unknown =
      typeof each === 'object' && each !== null ? Reflect.get(each, 'listenerCount') : undefined;
    return typeof count === 'function' && Number(Reflect.apply(count, each, ['connection'])) > 0;
  });
}

/** Methods of a connection a listener must not call on the delivery's: they end or leave the transaction. */
const INERT = new Set<PropertyKey>(['release', 'destroy', 'end']);
/** Transaction methods of a mysql2 connection, and the statement each sends. */
const CONTROL: Record<string, string> = { beginTransaction: 'BEGIN', commit: 'COMMIT', rollback: 'ROLLBACK' };

/**
 * The connection listeners get: it opens the transaction at its first query, queries in order on it,
 * and refuses what would end it early (see {@link openPoolTransaction}). Before its first query, its other
 * properties (`escape`, `format`) are the pool's.
 */
function guarded(pool: MysqlPool, held: Held, key: string): object {
  const refused = (): DeliveryError => new LateWriteError(key);
  // After a deadlock the server has rolled the transaction back, and a statement sent now would commit on
  // its own: every later query is refused, as PostgreSQL refuses them in an aborted transaction.
  const rolledBack = (): DeliveryError =>
    new DeliveryError(
      `the delivery transaction of ${key} was rolled back by the database (${messageOf(held.broken)}): this ` +
        'write was not made; a listener that catches that error cannot go on in the transaction: let it throw, ' +
        'and the attempt is retried',
      { cause: held.broken },
    );
  /** The connection for a query whose turn has come: opened at the first one. */
  const start = (): Promise<MysqlPoolConnection> => {
    if (held.ended) return Promise.reject(refused()); // abandoned while it waited for its turn
    if (held.broken !== undefined) return Promise.reject(rolledBack());
    held.opening ??= open(pool, held, key, refused);
    return held.opening.then((connection) => {
      if (held.ended || held.connection !== connection) throw refused();
      if (held.broken !== undefined) throw rolledBack();
      return connection;
    });
  };
  const run = (method: 'query' | 'execute', args: unknown[]): Promise<MysqlQueryResult> => {
    let mapped = args;
    try {
      mapped = asStatement(args, held, key);
    } catch (refusal) {
      return handled(Promise.reject(refusal as Error));
    }
    if (held.ended || held.marking) return handled(Promise.reject(refused()));
    const result = held.queue.then(start).then(async (connection) => {
      const call = Reflect.get(connection, method) as (...a: unknown[]) => Promise<MysqlQueryResult>;
      try {
        return await Reflect.apply(call, connection, mapped);
      } catch (error) {
        const errno = errnoOf(error);
        if (errno === DEADLOCK || errno === LOCK_WAIT_TIMEOUT) held.broken ??= error;
        throw error;
      }
    });
    held.queue = result.catch(() => {});
    return handled(result);
  };
  return new Proxy(
    {},
    {
      get(_target, property) {
        if (property === 'query' || property === 'execute') {
          return (...args: unknown[]) => run(property, args);
        }
        if (typeof property === 'string' && property in CONTROL) {
          return () => run('query', [CONTROL[property]]);
        }
        if (INERT.has(property)) return () => {};
        if (property === 'changeUser' || property === 'reset') {
          return () => handled(Promise.reject(sessionRefusal(key, property)));
        }
        const holder = held.connection ?? pool;
        const value: unknown = Reflect.get(holder, property, holder);
        return typeof value === 'function' ? (value as () => unknown).bind(holder) : value;
      },
    },
  );
}

/** Takes a connection and begins; the opening failure as a `StoreError` naming the likely cause. */
async function open(
  pool: MysqlPool,
  held: Held,
  key: string,
  refused: () => DeliveryError,
): Promise<MysqlPoolConnection> {
  let connection: MysqlPoolConnection;
  try {
    connection = await pool.getConnection();
  } catch (error) {
    throw new StoreError(
      `could not open the delivery transaction of ${key}: ${messageOf(error)} (is the pool exhausted, or the ` +
        'database unreachable? the attempt is retried)',
      { cause: error },
    );
  }
  if (held.ended) {
    connection.release(); // the attempt ended while the pool was handing it out
    throw refused();
  }
  held.connection = connection;
  try {
    await connection.query('START TRANSACTION');
  } catch (error) {
    held.connection = undefined;
    connection.destroy();
    throw new StoreError(`could not begin the delivery transaction of ${key}: ${messageOf(error)}`, {
      cause: error,
    });
  }
  return connection;
}

/**
 * MySQL's executable comments (a slash, a star and `!COMMIT`, or MariaDB's `M!100000 COMMIT`): the server
 * runs their text, so a statement is checked with them unwrapped.
 */
const EXECUTABLE_COMMENT = /\/\*M?!\d*([\s\S]*?)\*\//g;

/** A statement without the comments before its first word, which MySQL skips too. */
function withoutLeadingComments(statement: string): string {
  return statement.replace(/^(?:\s+|\/\*[\s\S]*?\*\/|--[^\n]*|#[^\n]*)*/, '');
}

/**
 * Statements after which MySQL has committed the open transaction (its "implicit commit"): DDL (temporary
 * tables aside), `LOCK TABLES` and `UNLOCK TABLES`, account and maintenance statements, `XA`; and `SET
 * autocommit`, which would also leave the connection committing nothing once back in the pool.
 */
const IMPLICIT_COMMIT =
  /^(?:(?:alter|create|drop|rename|truncate|grant|revoke|flush|analyze|optimize|repair|install|uninstall|xa)\b(?!\s+temporary\b)|(?:lock|unlock)\s+tables?\b|(?:set\s+password|load\s+index|cache\s+index)\b|set\b[\s\S]*\bautocommit\b)/i;

/** The refusal of a statement that would commit the delivery's transaction before its mark. */
function implicitCommitRefusal(statement: string, key: string): DeliveryError {
  const what = statement.trim().split(/\s+/).slice(0, 3).join(' ');
  return new DeliveryError(
    `a listener sent "${what}" through db, inside the delivery transaction of ${key}: MySQL commits the open ` +
      'transaction on it (DDL, LOCK TABLES, SET autocommit, ...), so your writes would land without the ' +
      'delivered mark, and again with the retry. It was not sent: run it outside the listener (in your ' +
      'migrations), or on a connection of your own',
  );
}

/**
 * The refusal of `USE` through db: the delivered mark runs on the same connection after the listeners, and
 * would look for the inbox in the other database; and a reset does not put the database back.
 */
function useRefusal(key: string): DeliveryError {
  return new DeliveryError(
    `a listener sent USE through db, inside the delivery transaction of ${key}: the delivered mark runs on ` +
      'this connection after the listeners, in its database, and the connection would go back to the pool ' +
      'in it. It was not sent: name the database in your statement (other_db.table), or use a connection of ' +
      'your own',
  );
}

/** The refusal of `db.reset()` or `db.changeUser()`: the server would roll back the delivery's transaction. */
function sessionRefusal(key: string, method: string): DeliveryError {
  return new DeliveryError(
    `a listener called db.${method}() inside the delivery transaction of ${key}: the server would roll the ` +
      "transaction back, and the listeners' later writes would land outside it. It was not called: ipn-kit " +
      'resets the connection after each attempt itself',
  );
}

/** A listener's query arguments as they run inside the delivery's transaction (savepoints for its own). */
function asStatement(args: unknown[], held: Held, key: string): unknown[] {
  const [first] = args;
  const text =
    typeof first === 'string'
      ? first
      : typeof first === 'object' && first !== null
        ? (Reflect.get(first, 'sql') as unknown)
        : undefined;
  if (typeof text !== 'string') return args;
  const statements = splitStatements(text.replace(EXECUTABLE_COMMENT, ' $1 ')).map(withoutLeadingComments);
  const mapped = asSavepoint(statements.join(';'), held.savepoints, key);
  if (mapped === undefined) {
    const committing = statements.find((statement) => IMPLICIT_COMMIT.test(statement));
    if (committing !== undefined) throw implicitCommitRefusal(committing, key);
    if (statements.some((statement) => /^use\b/i.test(statement))) throw useRefusal(key);
    return args;
  }
  held.savepoints = mapped.depth;
  return typeof first === 'string'
    ? [mapped.text, ...args.slice(1)]
    : [{ ...(first as object), sql: mapped.text }, ...args.slice(1)];
}

/** A promise marked handled: a listener's query nobody awaits never crashes the process. */
function handled<T>(promise: Promise<T>): Promise<T> {
  promise.catch(() => {});
  return promise;
}

/**
 * What a MySQL error means to a partner, when it says more than its message: a deadlock, after which
 * InnoDB has rolled back the whole transaction. `undefined` for any other.
 */
export function explainMysql(error: unknown): string | undefined {
  if (error instanceof IpnKitError) return error.message;
  if (errnoOf(error) === DEADLOCK) {
    return (
      'a deadlock: the database rolled back the transaction (a listener that catches a SQL error cannot go ' +
      'on in it: let the error throw, and the attempt is retried)'
    );
  }
  return undefined;
}

/** A session's counts of `COMMIT` and `ROLLBACK` statements, from `SHOW SESSION STATUS`. */
function endsOf({ rows }: StatementResult): { commits: number; rollbacks: number } {
  const count = (name: string) =>
    Number(rows.find((row) => String(row.Variable_name).toLowerCase() === name)?.Value);
  return { commits: count('com_commit'), rollbacks: count('com_rollback') };
}

/**
 * The ORM path's opening and mark on MySQL/MariaDB: what keeps a listener that ended the delivery's
 * transaction through `tx` from having `delivered` committed without its writes. The opening sets a
 * savepoint and reads the session's counts of `COMMIT` and `ROLLBACK` (see {@link mysqlOrmSql}); the mark
 * first releases the savepoint. Released: the transaction is the one the listeners wrote in, and `mark`
 * runs in it. Gone, after a raw `COMMIT` alone (the listeners' writes landed): `mark` runs, on its own, and
 * marking them delivered is right. Gone otherwise (a raw `ROLLBACK`, a deadlock the listener caught, a
 * statement that commits implicitly): nothing is marked, and the attempt fails with a `DeliveryError`
 * that says why, and is retried.
 *
 * Known gap: the counts cannot tell a statement that commits implicitly (DDL, `LOCK TABLES`, a raw
 * `BEGIN`: neither count moves) from a deadlock's rollback, nor a raw `COMMIT` then `ROLLBACK` from a
 * `ROLLBACK` then another transaction's `COMMIT`. Both are taken for a rollback, so the writes committed
 * before are written again by the retry (test/integration/mysql-orm.test.ts, `test.failing`).
 */
export function mysqlOrmMark(
  orm: string,
  key: string,
  mark: Statement,
): {
  opening: (run: Run) => Promise<StatementResult>;
  mark: (opened: StatementResult, run: Run) => Promise<Statement>;
} {
  const savepoint = `ipn_kit_delivery_${randomBytes(6).toString('hex')}`;
  return {
    opening: async (run) => {
      await run({ text: mysqlOrmSql.savepoint(savepoint), values: [], returns: 'count' });
      return run({ text: mysqlOrmSql.ends, values: [], returns: 'rows' });
    },
    mark: async (opened, run) => {
      try {
        await run({ text: mysqlOrmSql.release(savepoint), values: [], returns: 'count' });
        return mark;
      } catch (error) {
        if (errnoOf(error) !== NO_SUCH_SAVEPOINT) throw error;
      }
      const before = endsOf(opened);
      const after = endsOf(await run({ text: mysqlOrmSql.ends, values: [], returns: 'rows' }));
      const rolledBack = after.rollbacks !== before.rollbacks;
      if (!rolledBack && after.commits !== before.commits) return mark; // a raw COMMIT: the writes landed
      throw new DeliveryError(
        `a listener ended the delivery transaction of ${key} through tx (` +
          (rolledBack
            ? `a raw ROLLBACK through ${orm}): its writes were undone`
            : `through ${orm}, without COMMIT or ROLLBACK: a deadlock or lock wait timeout the listener ` +
              'caught, which rolled its writes back; or a statement that commits implicitly, such as DDL, ' +
              'LOCK TABLES or a raw BEGIN, after which they landed and the retry writes them again: never send ' +
              'one through tx)') +
          ', so it is not marked delivered; the attempt is retried. Throw from the listener instead: ' +
          'ipn-kit rolls back for you',
      );
    },
  };
}
