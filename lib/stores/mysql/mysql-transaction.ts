import { randomBytes } from 'node:crypto';
import { asSavepoint, splitStatements } from '../postgres/postgres-transaction.js';
import { Landed, ROLLED_BACK, type Run } from '../orm-transaction.js';
import { openPoolTransaction as openSeam, type PoolSide } from '../pool-transaction.js';
import type { DeliveryTransaction } from '../store.js';
import { mysqlOrmSql, NEVER_COMMITS } from './mysql-sql.js';
import type { Statement, StatementResult } from '../transactions.js';
import { DeliveryError, IpnKitError } from '../../shared/errors.js';
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

/**
 * Opens the delivery transaction of `key` on a connection of `pool`, through the seam every store's
 * transactions run through (`openPoolTransaction` of `pool-transaction.ts`, over `openOrmTransaction`): listeners get a guarded connection as `tx` and `db`,
 * taken at their first query, which sends `START TRANSACTION`; the mark runs in the same transaction, or
 * alone on the pool when no listener queried `db` (the state stays `idle`).
 *
 * Besides what that seam does (queries in order, savepoints for a listener's `BEGIN` / `START
 * TRANSACTION`, `COMMIT` and `ROLLBACK`, since in MySQL a `START TRANSACTION` inside a transaction commits
 * it; refusal once the attempt has ended; an abandoned attempt's connection closed), the connection runs
 * `beginTransaction()`, `commit()` and `rollback()` as those statements; `destroy()` and `end()` do
 * nothing; a statement MySQL commits implicitly on (DDL, `LOCK TABLES`, `SET autocommit`), `USE`,
 * `reset()` and `changeUser()` are refused. A deadlock (InnoDB then rolls the whole transaction back, and
 * later statements would commit on their own) refuses every later query and fails the commit. A
 * connection is reset before it goes back to the pool (see `giveBack`): the store's own statements never
 * run under a session a listener changed. The mark runs in that session (it must, to commit with the
 * listeners' writes); it depends on none of it but the database, so `USE` is refused.
 */
export function openPoolTransaction(
  pool: MysqlPool,
  key: string,
  mark: Statement,
): Promise<DeliveryTransaction<unknown, unknown>> {
  let savepoints = 0; // BEGINs a listener sent through db, open as savepoints
  const side: PoolSide<MysqlPoolConnection> = {
    name: 'MySQL',
    begin: 'START TRANSACTION',
    before: pool,
    take: () => pool.getConnection(),
    run: (connection, text) => connection.query(text),
    inside(args) {
      const mapped = asStatement(args, savepoints, key);
      savepoints = mapped.depth;
      return mapped.args;
    },
    send(started, method, args, held) {
      const result = started.then(async (connection) => {
        const call = Reflect.get(connection, method) as (...a: unknown[]) => Promise<MysqlQueryResult>;
        try {
          return await Reflect.apply(call, connection, args);
        } catch (error) {
          const errno = errnoOf(error);
          if (errno === DEADLOCK || errno === LOCK_WAIT_TIMEOUT) held.broken ??= error;
          throw error;
        }
      });
      return { result: handled(result), done: result };
    },
    async mark(connection, statement) {
      const result = await (connection ?? pool).query(statement.text, statement.values);
      const rows = rowsOf(result);
      return { rows, count: statement.returns === 'rows' ? rows.length : affectedOf(result) };
    },
    giveBack: (connection) => giveBack(pool, connection),
    destroy: (connection) => connection.destroy(),
    member(property, send) {
      if (property === 'execute') return (...args: unknown[]) => send('execute', args);
      if (typeof property === 'string' && Object.hasOwn(CONTROL, property)) {
        return () => send('query', [CONTROL[property]]);
      }
      if (property === 'destroy' || property === 'end') return () => {};
      if (property === 'changeUser' || property === 'reset') {
        return () => handled(Promise.reject(sessionRefusal(key, property)));
      }
      return undefined;
    },
  };
  return openSeam(side, key, mark, explainMysql);
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

/** Transaction methods of a mysql2 connection, and the statement each sends. */
const CONTROL: Record<string, string> = { beginTransaction: 'BEGIN', commit: 'COMMIT', rollback: 'ROLLBACK' };

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

/**
 * A listener's query arguments as they run inside the delivery's transaction, `depth` savepoints of its own
 * open (savepoints for its own), and the depth after it.
 */
function asStatement(args: unknown[], depth: number, key: string): { args: unknown[]; depth: number } {
  const [first] = args;
  const text =
    typeof first === 'string'
      ? first
      : typeof first === 'object' && first !== null
        ? (Reflect.get(first, 'sql') as unknown)
        : undefined;
  if (typeof text !== 'string') return { args, depth };
  const statements = splitStatements(text.replace(EXECUTABLE_COMMENT, ' $1 ')).map(withoutLeadingComments);
  const mapped = asSavepoint(statements.join(';'), depth, key);
  if (mapped === undefined) {
    const committing = statements.find((statement) => IMPLICIT_COMMIT.test(statement));
    if (committing !== undefined) throw implicitCommitRefusal(committing, key);
    if (statements.some((statement) => /^use\b/i.test(statement))) throw useRefusal(key);
    return { args, depth };
  }
  const replaced = typeof first === 'string' ? mapped.text : { ...(first as object), sql: mapped.text };
  return { args: [replaced, ...args.slice(1)], depth: mapped.depth };
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

/**
 * A session's statement counts (`Com_*`, lower-cased), from `SHOW SESSION STATUS` ({@link mysqlOrmSql}).
 * Kept as the server wrote them: a count can wrap (MariaDB takes 1 off `Com_create_table` for a `CREATE
 * TEMPORARY SEQUENCE`, from 0 to 2^64 - 1), and as a number, or in a sum, it would hide the next moves.
 */
function countsOf({ rows }: StatementResult): Map<string, string> {
  const counts = new Map<string, string>();
  for (const row of rows) {
    const name = String(row.Variable_name).toLowerCase();
    if (name.startsWith('com_')) counts.set(name, String(row.Value));
  }
  return counts;
}

/**
 * The ORM path's opening and mark on MySQL/MariaDB: what keeps a listener that ended the delivery's
 * transaction through `tx` from having `delivered` committed without its writes, or its writes committed
 * twice. The opening sets a savepoint and reads the session's counts (see {@link mysqlOrmSql}); the mark
 * first releases the savepoint. Released: the transaction is the one the listeners wrote in, and `mark`
 * runs in it. Gone, the counts since the opening say what ended it:
 * - a raw `COMMIT` alone: the listeners' writes landed; `mark` runs, on its own, and marking them
 *   delivered is right;
 * - nothing counted (a deadlock the listener caught, or a lock wait timeout with
 *   `innodb_rollback_on_timeout`): they were undone; nothing is marked, and the attempt fails with a
 *   `DeliveryError` that says why, and is retried;
 * - a raw `ROLLBACK` alone: the writes before it were undone, and any sent after it landed on its own
 *   (autocommit): the listener resolved, as if it had written them ({@link Landed}, `ROLLED_BACK`): dead;
 * - a statement that commits implicitly (DDL, `LOCK TABLES`, a raw `BEGIN`), or a `COMMIT` and a
 *   `ROLLBACK`: they landed, or may have ({@link Landed}): neither marked nor retried, the entry is dead.
 * `landed`, for an attempt that failed: the writes landed, or may have, when anything but a `ROLLBACK`
 * was counted.
 *
 * Known gaps: on MySQL 8, `CREATE TEMPORARY TABLE` counts as `Com_create_table`: with a deadlock the
 * listener caught, the entry is kept dead though its writes were undone. After a deadlock, or a raw
 * `ROLLBACK` in a listener that then throws, the session autocommits: a write a listener sends after it
 * (retrying its credit) lands at once, and the retry writes it again.
 */
export function mysqlOrmMark(
  orm: string,
  key: string,
  mark: Statement,
): {
  opening: (run: Run) => Promise<StatementResult>;
  mark: (opened: StatementResult, run: Run) => Promise<Statement>;
  landed: (opened: StatementResult, run: Run) => Promise<string | undefined>;
} {
  const savepoint = `ipn_kit_delivery_${randomBytes(6).toString('hex')}`;
  /** Whether the savepoint is still there (released now): the transaction is the one the listeners wrote in. */
  const released = async (run: Run): Promise<boolean> => {
    try {
      await run({ text: mysqlOrmSql.release(savepoint), values: [], returns: 'count' });
      return true;
    } catch (error) {
      if (errnoOf(error) !== NO_SUCH_SAVEPOINT) throw error;
      return false;
    }
  };
  const endsSince = async (opened: StatementResult, run: Run) => {
    const before = countsOf(opened);
    const after = countsOf(await run({ text: mysqlOrmSql.ends, values: [], returns: 'rows' }));
    const moved = (name: string) => before.get(name) !== after.get(name);
    const commits = moved('com_commit');
    const rollbacks = moved('com_rollback');
    // Any other count that moved, but those of the statements that never end a transaction.
    const implicit = [...new Set([...before.keys(), ...after.keys()])].some(
      (name) => name !== 'com_commit' && name !== 'com_rollback' && !NEVER_COMMITS.test(name) && moved(name),
    );
    const how = implicit
      ? 'a statement that commits implicitly (DDL, LOCK TABLES, a raw BEGIN)'
      : 'a raw COMMIT';
    return { commits, rollbacks, implicit, how };
  };
  return {
    opening: async (run) => {
      await run({ text: mysqlOrmSql.savepoint(savepoint), values: [], returns: 'count' });
      return run({ text: mysqlOrmSql.ends, values: [], returns: 'rows' });
    },
    mark: async (opened, run) => {
      if (await released(run)) return mark;
      const { commits, rollbacks: rolledBack, implicit, how } = await endsSince(opened, run);
      if (commits && !rolledBack && !implicit) return mark; // a raw COMMIT: the writes landed
      if (commits || implicit) {
        throw new Landed(key, orm, rolledBack ? `${how}, and a raw ROLLBACK` : how);
      }
      // A raw ROLLBACK, then the listener resolved: MySQL autocommits after it, so a write sent since (a
      // listener that retries its credit) has landed on its own, and a retry would write it again.
      if (rolledBack) throw new Landed(key, orm, ROLLED_BACK);
      throw new DeliveryError(
        `a listener ended the delivery transaction of ${key} through tx (through ${orm}, without COMMIT ` +
          'or ROLLBACK: a deadlock, or a lock wait timeout with innodb_rollback_on_timeout, that the ' +
          'listener caught, which rolled its writes back), so it is not marked delivered; the attempt is ' +
          'retried. Throw from the listener instead: ipn-kit rolls back for you',
      );
    },
    landed: async (opened, run) => {
      if (await released(run)) return undefined;
      const { commits, implicit, how } = await endsSince(opened, run);
      return commits || implicit ? how : undefined;
    },
  };
}
