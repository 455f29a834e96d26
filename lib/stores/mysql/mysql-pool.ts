/**
 * What a mysql2 query resolves: `[rows, fields]` for a `SELECT`, `[header, undefined]` for a write, whose
 * header holds `affectedRows`.
 * @inline
 */
export type MysqlQueryResult = [unknown, unknown];

/**
 * The part of a mysql2 promise connection (`await pool.getConnection()`) the store uses. Declared here so
 * that ipn-kit's types never name the `mysql2` package.
 */
export interface MysqlPoolConnection {
  /** Runs one statement (`?` placeholders bound to `values`) on this connection. */
  query(sql: string, values?: unknown): Promise<MysqlQueryResult>;
  /** Gives the connection back to its pool. */
  release(): void;
  /** Closes the connection (the server rolls back what it had open) and takes it out of its pool. */
  destroy(): void;
  /**
   * Puts the session back as the server starts one (`COM_RESET_CONNECTION`: variables, temporary tables,
   * user variables, prepared statements; not the current database), keeping the connection open. mysql2
   * 3.x has it; without it, a connection a listener queried is closed after the attempt instead.
   */
  reset?(): Promise<unknown>;
}

/**
 * The part of a mysql2 promise pool (`createPool()` from `mysql2/promise`) the store uses. Declared here
 * so that ipn-kit's types never name the `mysql2` package.
 */
export interface MysqlPool {
  /** Runs one statement (`?` placeholders bound to `values`) on a connection of the pool. */
  query(sql: string, values?: unknown): Promise<MysqlQueryResult>;
  /** Hands out a connection of the pool, for a transaction. */
  getConnection(): Promise<MysqlPoolConnection>;
}

/**
 * The connection type your pool hands out (a mysql2 `PoolConnection` for a `mysql2/promise` pool): the type
 * of a listener's `tx` and `db` with `MysqlStore`.
 */
export type MysqlConnectionOf<P> = P extends { getConnection(): Promise<infer C> } ? C : never;

/** The rows of a `SELECT`'s result (none for a write). */
export function rowsOf(result: MysqlQueryResult): Array<Record<string, unknown>> {
  const [rows] = result;
  return Array.isArray(rows) ? (rows as Array<Record<string, unknown>>) : [];
}

/** How many rows a write matched (`affectedRows`; mysql2 asks for found rows, not changed ones). */
export function affectedOf(result: MysqlQueryResult): number {
  const [header] = result;
  if (Array.isArray(header)) return header.length;
  const affected: unknown =
    typeof header === 'object' && header !== null ? Reflect.get(header, 'affectedRows') : undefined;
  return typeof affected === 'number' ? affected : Number(affected ?? 0);
}

/** Reads `error`'s `errno`, and its `cause`'s down a few levels (an ORM wraps the driver's error). */
export function errnoOf(error: unknown): number | undefined {
  let current: unknown = error;
  for (let depth = 0; depth < 5 && typeof current === 'object' && current !== null; depth += 1) {
    try {
      const errno: unknown = Reflect.get(current, 'errno');
      if (typeof errno === 'number') return errno;
      current = Reflect.get(current, 'cause');
    } catch {
      return undefined; // a revoked Proxy: a failure like any other
    }
  }
  return undefined;
}

/** MySQL's ER_NO_SUCH_TABLE. */
export const NO_SUCH_TABLE = 1146;
/** MySQL's ER_DUP_ENTRY: a duplicate primary key. */
export const DUPLICATE_KEY = 1062;
/** MySQL's ER_LOCK_DEADLOCK: InnoDB rolled back the whole transaction. */
export const DEADLOCK = 1213;
/** MySQL's ER_SP_DOES_NOT_EXIST: no savepoint of that name (the transaction that had it has ended). */
export const NO_SUCH_SAVEPOINT = 1305;
/** MySQL's ER_LOCK_WAIT_TIMEOUT. */
export const LOCK_WAIT_TIMEOUT = 1205;
/** MySQL's ER_TRUNCATED_WRONG_VALUE_FOR_FIELD: "Incorrect string value", text the connection's charset cannot carry. */
export const INCORRECT_STRING = 1366;

/**
 * Why a connection of the pool cannot store every notification exactly, or `undefined` when it can: its
 * `sql_mode` must not have `NO_BACKSLASH_ESCAPES`, as mysql2 escapes the values it binds with backslashes,
 * and a record's JSON is full of them. (Its charset does not matter to the record, which is stored as
 * ASCII.)
 */
export async function unfitSession(connection: MysqlPoolConnection): Promise<string | undefined> {
  const [row] = rowsOf(await connection.query('SELECT @@SESSION.sql_mode AS mode'));
  if (String(row?.mode).toUpperCase().includes('NO_BACKSLASH_ESCAPES')) {
    return (
      "the session's sql_mode has NO_BACKSLASH_ESCAPES, and mysql2 escapes the values it sends with " +
      'backslashes: a record holding a quote or a backslash would be refused or changed. Remove it from the ' +
      "pool's sql_mode"
    );
  }
  return undefined;
}

/**
 * Runs `work` in a transaction on a connection of `pool`, `READ COMMITTED` (a locking read takes no gap
 * locks, so it holds up no receive): commits when it resolves, rolls back when it rejects. The connection
 * goes back to the pool, or is closed when the rollback failed too.
 */
export async function inTransaction<T>(
  pool: MysqlPool,
  work: (connection: MysqlPoolConnection) => Promise<T>,
): Promise<T> {
  const connection = await pool.getConnection();
  try {
    await connection.query('SET TRANSACTION ISOLATION LEVEL READ COMMITTED');
    await connection.query('START TRANSACTION');
    const result = await work(connection);
    await connection.query('COMMIT');
    connection.release();
    return result;
  } catch (error) {
    await connection.query('ROLLBACK').then(
      () => connection.release(),
      () => connection.destroy(),
    );
    throw error;
  }
}

/** Whether `value` has the methods of a mysql2 promise pool: `query` and `getConnection`. */
export function isMysqlPool(value: unknown): value is MysqlPool {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof Reflect.get(value, 'query') === 'function' &&
    typeof Reflect.get(value, 'getConnection') === 'function'
  );
}

/**
 * Whether `value` is a mysql2 pool of the callback API (`createPool` from `mysql2`, not `mysql2/promise`):
 * it has `promise()`, which gives the promise pool the store needs.
 */
export function isCallbackPool(value: unknown): boolean {
  return typeof value === 'object' && value !== null && typeof Reflect.get(value, 'promise') === 'function';
}
