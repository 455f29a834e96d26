import { checkLeaseLimit, claimTtlMs, unknownSettlement } from '../store-core.js';
import { missingTable, SqlStore, type SqlDialect, type TableOf } from '../sql-store.js';
import { SqlAudit } from '../sql-audit.js';
import { sqlPauseSwitch } from '../sql-pause-switch.js';
import { createHash, randomUUID } from 'node:crypto';
import { BatchStall, createBatcher } from '../batcher.js';
import { retriedAfterMigration, trackMigration } from '../postgres/postgres-migrations.js';
import { openOrmTransaction } from '../orm-transaction.js';
import { isTransactions, type Statement, type Transactions } from '../transactions.js';
import type {
  DeliveryTransaction,
  DurableStore,
  InboxEntry,
  Lease,
  Settlement,
  PauseSwitch,
} from '../store.js';
import { messageOf, StoreError } from '../../shared/errors.js';
import { mysqlExpectations } from './mysql-expectations.js';
import type { SqlExpectations } from '../sql-expectations.js';
import { MysqlLifecycle } from './mysql-lifecycle.js';
import {
  affectedOf,
  DUPLICATE_KEY,
  errnoOf,
  INCORRECT_STRING,
  inTransaction,
  isCallbackPool,
  isMysqlPool,
  NO_SUCH_TABLE,
  rowsOf,
  type MysqlConnectionOf,
  type MysqlPool,
  type MysqlPoolConnection,
  type MysqlQueryResult,
  unfitSession,
} from './mysql-pool.js';
import {
  asUtf8Hex,
  checkId,
  checkKey,
  customDataOf,
  errorText,
  leaseMs,
  msOfDate,
  splitKey,
  toEntry,
  toStoredJson,
} from './mysql-rows.js';
import {
  mysqlAuditTable,
  mysqlClaimsTable,
  mysqlInboxSql,
  mysqlTableNames,
  type MysqlInboxSql,
} from './mysql-sql.js';
import { explainMysql, mysqlOrmMark, openPoolTransaction } from './mysql-transaction.js';
import { mysqlControlTable, mysqlSchemaDialect } from './mysql-schema.js';
import { migrateWorded, type MigrateOptions, type MigrationReport } from '../schema-migrations.js';

/**
 * Options of {@link MysqlStore}.
 * @inline
 */
export interface MysqlStoreOptions<
  P extends MysqlPool = MysqlPool,
  T extends Transactions<any> | undefined = undefined, // eslint-disable-line @typescript-eslint/no-explicit-any
> {
  /**
   * Your mysql2 promise pool (`createPool()` from `mysql2/promise`; for a pool of the callback API, pass
   * `pool.promise()`). The store runs its statements through it and never ends it. At least once without
   * `transactions`, a delivery attempt whose listeners query `db` holds one connection of it from that
   * first query to its commit, and a lease pass that finds entries due takes one for its transaction:
   * size `connectionLimit` for those concurrent deliveries plus the receives. Keep mysql2's default flags (`FOUND_ROWS`: a count
   * is of the rows matched) and the server's default `sql_mode` on backslash escapes.
   */
  pool: P;
  /**
   * Your ORM's transactions (`knexTransactions(knex)`, ... from `ipn-kit/orm`, made for MySQL): at least
   * once, each delivery attempt runs in a transaction of your ORM, listeners write through its transaction
   * object (their context's `tx`), and the store marks the entry delivered inside it. Point the ORM at the
   * same database as `pool`.
   * @default undefined: delivery transactions on `pool`'s connections, as `tx` and `db`
   */
  transactions?: T;
  /**
   * The inbox table: `name` or `database.name`, of letters, digits and underscores. The expectations table
   * is `<table>_expected` beside it.
   * @default 'ipn_inbox'
   */
  table: string;
}

/**
 * The listeners' `tx` of a store: the ORM's transaction, or the pool's connection.
 * @inline
 */
type TxOf<P, T> = T extends Transactions<infer Tx> ? Tx : MysqlConnectionOf<P>;
/**
 * The listeners' `db` of a store: the pool's connection, or none with an ORM's transactions.
 * @inline
 */
type DbOf<P, T> = T extends Transactions<unknown> ? never : MysqlConnectionOf<P>;

/** How long `migrate()` waits for another process's migration of the same table, in seconds. */
const MIGRATE_LOCK_SECONDS = 60;

/**
 * A dedupe store and durable inbox in MySQL 8 or MariaDB 10.6+, shared by every instance of your app. A
 * notification's row is keyed by `transaction_id:state`: the primary key makes a claim (or a receive)
 * atomic across instances.
 *
 * - As a plain store (the router's default, at-most-once mode), `claim` inserts a row in `<table>_claims`
 *   (never in the inbox), which holds the key for the router's `ttlMs` (by the database's clock); then a
 *   resend is a new notification again. The row stays, holding nothing, until `purge(before)`.
 * - As a durable inbox (`delivery: 'at-least-once'`), each notification is stored whole, and its delivery
 *   attempts are leased (`SELECT ... FOR UPDATE SKIP LOCKED`), settled and retried through the table.
 *   Receives that arrive together are inserted as one statement (group commit).
 *
 * Create the tables once with {@link MysqlStore.migrate} (safe to run on every start, from every instance
 * at once), or with the SQL of {@link mysqlMigrations} in your own migrations. Every
 * time comparison uses the database's clock, in UTC. Give it your own mysql2 pool; ipn-kit loads no MySQL
 * package, and `ipn.close()` leaves the pool open.
 *
 * With `delivery: 'at-least-once'`, each delivery attempt runs in a transaction: the listeners get a
 * connection of the pool as `tx` and `db`, and what they write through it commits together with the
 * `delivered` mark, or rolls back with a failed attempt (see {@link MysqlStore.begin}).
 *
 * @example
 * import { createPool } from 'mysql2/promise';
 * import { ipnRouter } from 'ipn-kit';
 * import { MysqlStore } from 'ipn-kit/mysql';
 *
 * const pool = createPool(process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/app');
 * const store = new MysqlStore({ pool });
 * await store.migrate();
 * const ipn = ipnRouter({ store, delivery: 'at-least-once' });
 * ipn.on('successful', async (n, { db }) => {
 *   await db.query('INSERT INTO ledger (transaction_id, amount) VALUES (?, ?)', [n.transaction_id, n.amount]);
 * });
 * app.use('/ipn', ipn);
 */
export class MysqlStore<
  P extends MysqlPool = MysqlPool,
  T extends Transactions<any> | undefined = undefined, // eslint-disable-line @typescript-eslint/no-explicit-any
>
  extends SqlStore
  implements DurableStore
{
  /** The table, as given. */
  readonly table: string;
  /** Where `ipn.expect()` keeps expected transactions: the table `<table>_expected`, made by `migrate()`. */
  readonly expectations: SqlExpectations;
  /** Operator actions: the table `<table>_audit`, made by `migrate()` (or {@link mysqlAuditSql}). */
  readonly audit: SqlAudit;
  /** Whether delivery is paused for every instance: the row `paused` of `<table>_control`, made by `migrate()`. */
  readonly pauseSwitch: PauseSwitch;
  /** Each transaction's accepted final state: the table `<table>_states`, made by `migrate()`. */
  readonly lifecycle: MysqlLifecycle;
  readonly #pool: MysqlPool;
  readonly #transactions: Transactions | undefined;
  readonly #sql: MysqlInboxSql;
  /** @internal */
  protected readonly dialect: SqlDialect;
  /** How long a batch stuck on its connection holds its place: the routers' shortest `storeTimeoutMs`. */
  readonly #stall = new BatchStall();
  /** Receives that arrive together go as one statement (group commit). */
  readonly #receives = createBatcher((batch: unknown[][]) => this.#receiveMany(batch), {
    stallMs: this.#stall.ms,
  });

  /**
   * @throws TypeError when `pool` is not a mysql2 promise pool (`query` and `getConnection`), `transactions`
   * is not a `Transactions`, or `table` is not a valid name.
   */
  constructor(options: Pick<MysqlStoreOptions<P, T>, 'pool'> & Partial<MysqlStoreOptions<P, T>>) {
    super();
    const given = options as Partial<MysqlStoreOptions<P, T>> | undefined;
    const transactions: unknown = given?.transactions;
    if (transactions !== undefined && !isTransactions(transactions)) {
      throw new TypeError(
        'MysqlStore: transactions must come from ipn-kit/orm (knexTransactions(knex), ...), or be an object with transaction(work) and query(tx, statement)',
      );
    }
    const pool: unknown = given?.pool;
    if (!isMysqlPool(pool) || isCallbackPool(pool)) {
      throw new TypeError(
        isCallbackPool(pool)
          ? 'MysqlStore: pool is a pool of the callback API (mysql2): pass pool.promise(), or create it with createPool from mysql2/promise'
          : 'MysqlStore: pool must be a mysql2 promise pool (createPool() from mysql2/promise), or an object with its query(sql, values) and getConnection() methods',
      );
    }
    this.table = mysqlTableNames(given?.table ?? 'ipn_inbox').name;
    this.#pool = pool;
    this.#transactions = transactions;
    this.#sql = mysqlInboxSql(this.table);
    this.expectations = mysqlExpectations(
      {
        query: (text, values) => this.#query(text, values, 'expectations'),
        transaction: (work) => this.#transaction(work, 'expectations'),
      },
      this.table,
    );
    this.lifecycle = new MysqlLifecycle((work) => this.#transaction(work), this.table, this.#stall.ms);
    const about =
      (of: TableOf) =>
      async (text: string, values: unknown[]): Promise<Array<Record<string, unknown>>> =>
        rowsOf(await this.#query(text, values, of));
    const audited = about('audit');
    this.audit = new SqlAudit({ write: audited, read: audited }, mysqlAuditTable(this.table));
    const control = mysqlControlTable(this.table);
    const controlled = about('control');
    this.pauseSwitch = sqlPauseSwitch(control, {
      read: (text) => controlled(text, []),
      write: (value) =>
        controlled(
          `INSERT INTO ${control} (name, value, updated_ms) VALUES ('paused', ?, ?) ` +
            'ON DUPLICATE KEY UPDATE value = VALUES(value), updated_ms = VALUES(updated_ms)',
          [value, Date.now()],
        ),
    });
    const time = (date: Date | undefined, what: string) => (date === undefined ? null : msOfDate(date, what));
    const twice = (value: unknown): unknown[] => [value, value];
    this.dialect = {
      owner: 'MysqlStore',
      sql: this.#sql,
      read: async (text, values) => rowsOf(await this.#query(text, values)),
      change: async (text, values) => affectedOf(await this.#query(text, values)),
      checkKey,
      toEntry,
      time: (date) => date.getTime(),
      release: (key, leaseId) => [key, leaseId, leaseId],
      list: (o) => {
        const from = time(o.receivedFrom, 'list: receivedFrom');
        const before = time(o.receivedBefore, 'list: receivedBefore');
        const values = [
          ...twice(o.status ?? null),
          ...twice(o.transactionId ?? null),
          ...twice(o.customDataContains === undefined ? null : asUtf8Hex(o.customDataContains)),
          ...twice(from),
          ...twice(before),
        ];
        return [this.#sql.list(o.order === 'newest', o.limit, o.offset), values];
      },
      countByStatus: (receivedFrom) => twice(time(receivedFrom, 'countByStatus: receivedFrom')),
      replay: (key, delayMs, from) => {
        const statuses = from === undefined ? null : from.join(',');
        return [Math.round(delayMs), key, statuses, statuses];
      },
      replayWith: (key, record, from) => [toStoredJson(record), customDataOf(record), key, from.join(',')],
      stored: toStoredJson,
    };
  }

  /**
   * {@link MysqlStore.migrate}, saying what it did: the version before and after, and the versions run.
   * It brings the store's tables to the latest schema version: the inbox, `<table>_expected`,
   * `<table>_states` and `<table>_audit`, with the version recorded in `<table>_schema` (the SQL of
   * {@link mysqlMigrations}). Runs each version above the database's in order (a database made before
   * versions is at 0; its rows are kept as they are). Several processes at once take turns on a named lock
   * (`GET_LOCK`). `{ dryRun: true }` runs nothing and says what would run (`ipn-kit migrate --dry-run`).
   * @throws StoreError as `migrate()`, or when another `migrate()` holds the lock for a minute.
   */
  async migrateSchema(options?: MigrateOptions): Promise<MigrationReport> {
    let report: MigrationReport | undefined;
    // Recorded at once, before any await: a query of the router's first recovery pass that finds no table
    // meanwhile waits for it and runs again, so the documented start logs no missing table.
    await trackMigration(this.#pool, this.table, async () => {
      const dialect = mysqlSchemaDialect(this.table, (work) => this.#migrationLock(work));
      const hint =
        ' (the user needs CREATE on the database; or create it with the SQL of mysqlMigrations() in your migrations)';
      report = await migrateWorded(dialect, options, hint);
    });
    return report!;
  }

  /**
   * Runs `work` on one connection of the pool that holds the migration's named locks of this table: keyed
   * by the table as MySQL resolves it, `<database>.<table>` (an unqualified name in the connection's
   * database, `DATABASE()`), so that `inbox` and `app.inbox` take turns. The lock of the unqualified name
   * is taken first, whichever the spelling: the one of ipn-kit's versions before this for that spelling, so
   * an instance still on one takes turns with both spellings; always in that order, so two never deadlock.
   */
  async #migrationLock<T>(
    work: (connection: {
      rows(sql: string, values?: unknown[]): Promise<Array<Record<string, unknown>>>;
    }) => Promise<T>,
  ): Promise<T> {
    const named = (name: string): string => `ipn-kit:${createHash('sha1').update(name).digest('hex')}`;
    const bare = this.table.split('.').pop()!;
    let connection: MysqlPoolConnection | undefined;
    try {
      connection = await this.#pool.getConnection();
      const locks = [named(bare)];
      if (this.table.includes('.')) {
        locks.push(named(this.table));
      } else {
        const [resolved] = rowsOf(
          await connection.query(
            "SELECT CONCAT('ipn-kit:', SHA1(CONCAT(COALESCE(DATABASE(), ''), '.', ?))) AS name",
            [this.table],
          ),
        );
        locks.push(String(resolved?.name));
      }
      for (const lock of locks) {
        const [row] = rowsOf(
          await connection.query('SELECT GET_LOCK(?, ?) AS locked', [lock, MIGRATE_LOCK_SECONDS]),
        );
        if (Number(row?.locked) !== 1) {
          throw new StoreError(
            `MysqlStore.migrate: another migrate() held the lock ${lock} for ${MIGRATE_LOCK_SECONDS} s`,
          );
        }
      }
      const unfit = await unfitSession(connection);
      if (unfit !== undefined) throw new StoreError(`MysqlStore.migrate: ${unfit}`);
      const held = connection;
      const result = await work({ rows: async (sql, values) => rowsOf(await held.query(sql, values)) });
      for (const lock of locks.reverse()) await connection.query('SELECT RELEASE_LOCK(?)', [lock]);
      connection.release();
      return result;
    } catch (error) {
      connection?.destroy(); // closing the connection lets go of its locks
      throw error;
    }
  }

  /**
   * Inserts a row for `key` in `<table>_claims` that holds the key for `ttlMs` (by the database's clock),
   * unless the key is claimed, or received in the inbox; a claim whose `ttlMs` has run out is taken over,
   * in the same statement (two at once: one wins, the other waits for its row lock and finds it live). The
   * row stays until `purge()`, holding nothing.
   * @returns `true` when the row is this `token`'s (this call took the key, or an earlier one with the same
   * token did) and the inbox has no entry of the key, `false` when another claim holds it, or it was received.
   * @throws TypeError unless `ttlMs` is a positive number (a ttl above a century holds the key a century).
   */
  async claim(key: string, ttlMs: number, token: string = randomUUID()): Promise<boolean> {
    splitKey(key);
    checkId(token, 'a claim token');
    const ms = claimTtlMs('MysqlStore', ttlMs);
    // The upsert's affected rows cannot tell an insert from a live claim left alone (both 1, with mysql2's
    // FOUND_ROWS): whether the row is now this token's says it. Not whether it is still live: a short ttl may
    // run out between the two statements, and the key is still this claim's until another takes it over (a
    // claim: another token) or a receive has it (an entry in the inbox).
    await this.#query(this.#sql.claim, [key, token, ms, key, token, ms, ms], 'claims');
    return rowsOf(await this.#query(this.#sql.claimedBy, [key, token, key], 'claims')).length > 0;
  }

  /** Inserts `record` as `received`, attempts 1, leased to `lease` (until the database's now + `lease.ms`). */
  async receive(key: string, record: Record<string, unknown>, lease: Lease): Promise<boolean> {
    const [transactionId, state] = splitKey(key);
    const ms = leaseMs(lease);
    const values = [key, transactionId, state, toStoredJson(record), customDataOf(record), lease.id, ms];
    return this.#receives(values);
  }

  /**
   * One batch of receives: one statement, one commit (then one read of which rows it inserted). A key
   * received twice in one batch is inserted once, and only its first caller is told so. A failed batch
   * rejects every caller: each receive answers 503.
   */
  async #receiveMany(batch: unknown[][]): Promise<boolean[]> {
    if (batch.length === 1) return [await this.#insert(this.#sql.receive, batch[0]!)];
    const first = new Map<string, number>(); // each key's first caller
    batch.forEach((values, index) => {
      if (!first.has(values[0] as string)) first.set(values[0] as string, index);
    });
    const keys = [...first.keys()].sort();
    const rows = keys.map((key) => batch[first.get(key)!]!);
    await this.#query(this.#sql.receiveMany(rows.length), rows.flat());
    const held = new Map(
      rowsOf(await this.#query(this.#sql.receivedBy, [keys])).map((row) => [row.key, row.lease_id]),
    );
    return batch.map(
      (values, index) => first.get(values[0] as string) === index && held.get(values[0]) === values[5],
    );
  }

  /** Puts the service's `record` in place of the entry `leaseId` holds, in one statement (see `DurableStore`). */
  async replace(
    key: string,
    leaseId: string,
    record: Record<string, unknown>,
    lease: Lease,
  ): Promise<boolean> {
    checkKey(key);
    const ms = leaseMs(lease);
    const values = [toStoredJson(record), customDataOf(record), lease.id, ms, key, leaseId];
    return affectedOf(await this.#query(this.#sql.replace, values)) === 1;
  }

  /**
   * Leases up to `limit` due entries in one transaction, received ones first, then failed ones due for a
   * retry, each oldest first: their rows are locked with `FOR UPDATE SKIP LOCKED` (instances leasing at the
   * same time get disjoint entries), updated, then read. A pass that finds nothing due takes no connection
   * for a transaction.
   */
  async lease(lease: Lease, limit: number): Promise<InboxEntry[]> {
    checkLeaseLimit('MysqlStore', limit);
    const ms = leaseMs(lease);
    if (limit === 0) return [];
    if (rowsOf(await this.#query(this.#sql.anyDue, [])).length === 0) return [];
    return this.#transaction(async (connection) => {
      // New notifications first, then failed ones due for a retry, each oldest first.
      const keys = rowsOf(await connection.query(this.#sql.due('received', limit))).map((row) => row.key);
      if (keys.length < limit) {
        const failed = await connection.query(this.#sql.due('failed', limit - keys.length));
        keys.push(...rowsOf(failed).map((row) => row.key));
      }
      if (keys.length === 0) return [];
      await connection.query(this.#sql.take, [lease.id, ms, keys]);
      return rowsOf(await connection.query(this.#sql.taken, [keys, lease.id])).map(toEntry);
    });
  }

  /** Ends the attempt, only while `leaseId` still holds the entry. A failure's `nextAttemptAt` is stored as given. */
  async settle(key: string, leaseId: string, settlement: Settlement): Promise<boolean> {
    checkKey(key);
    const [text, values] = this.#settlement(key, leaseId, settlement);
    return affectedOf(await this.#query(text, values)) === 1;
  }

  #settlement(key: string, leaseId: string, settlement: Settlement): [string, unknown[]] {
    switch (settlement?.status) {
      case 'delivered':
        return [this.#sql.delivered, [key, leaseId]];
      case 'failed': {
        const next = msOfDate(settlement.nextAttemptAt, 'settle: nextAttemptAt');
        return [this.#sql.failed, [asUtf8Hex(errorText(settlement.error)), next, key, leaseId]];
      }
      case 'dead':
        return [this.#sql.dead, [asUtf8Hex(errorText(settlement.error)), key, leaseId]];
      default:
        throw unknownSettlement('MysqlStore', settlement);
    }
  }

  /**
   * Opens the transaction of one delivery attempt held by `leaseId` (the router calls it, at least once,
   * after verification and before the listeners). Its `commit()` marks the entry delivered in the same
   * transaction, only while `leaseId` still holds it (otherwise it rolls back: another attempt has the
   * entry), then commits. So the listeners' writes and the mark land together or not at all, whatever
   * crashes when.
   *
   * With `transactions`, your ORM opens it, and listeners get the ORM's transaction object as `tx`.
   * Without, listeners get a connection of the pool as `tx` and `db`: the first query they make through it
   * takes the connection and sends `START TRANSACTION` on it; when no listener queried it, there is
   * nothing to make atomic and no connection was taken: the mark runs alone. A `BEGIN`, `COMMIT` or
   * `ROLLBACK` a listener sends through it runs as a savepoint. DDL (and anything else MySQL commits
   * implicitly, such as `LOCK TABLES`) and `USE` are refused through it. What a listener sets on the session
   * (`SET time_zone`, `SET @var`, a temporary table) ends with the attempt: the connection is reset
   * (`COM_RESET_CONNECTION`) before it goes back to the pool, or closed when the reset fails or the pool
   * has a `connection` listener (your session setup, which a reset would undo).
   */
  begin(key: string, leaseId: string): Promise<DeliveryTransaction<TxOf<P, T>, DbOf<P, T>> | undefined> {
    type Opened = DeliveryTransaction<TxOf<P, T>, DbOf<P, T>>;
    checkKey(key);
    const mark: Statement = { text: this.#sql.delivered, values: [key, leaseId], returns: 'count' };
    if (this.#transactions) {
      // A listener may end the ORM's transaction through tx (a raw ROLLBACK): the mark checks it first.
      const checked = mysqlOrmMark(this.#transactions.name, key, mark);
      const { mark: checkedMark, opening, landed } = checked;
      const opened = openOrmTransaction(this.#transactions, key, checkedMark, {
        explain: explainMysql,
        opening,
        landed,
      });
      return opened as Promise<Opened>;
    }
    return openPoolTransaction(this.#pool, key, mark) as Promise<Opened>;
  }

  /** Does nothing: the pool is yours, and other parts of your app may still use it. End it yourself. */
  close(): void {}

  /**
   * The router's `storeTimeoutMs` (it calls this; several routers on one store: the shortest wins). A batch
   * of receives or lifecycle decisions stuck that long on its connection (a network partition) gives up its
   * place, so that the calls behind it are sent on their own instead of queueing until the router answers
   * them 503.
   */
  useStoreTimeout(storeTimeoutMs: number): void {
    this.#stall.use(storeTimeoutMs);
  }

  /** One statement on the pool; a failure is a `StoreError`. */
  #query(text: string, values: unknown[], of: TableOf = 'inbox'): Promise<MysqlQueryResult> {
    return this.#run(() => this.#pool.query(text, values), of);
  }

  /**
   * An insert: `true` when it inserted its row, `false` when its key was there (a duplicate key) or its
   * `WHERE NOT EXISTS` found the key claimed or received in the other table.
   */
  #insert(text: string, values: unknown[], of: TableOf = 'inbox'): Promise<boolean> {
    return this.#run(
      () =>
        this.#pool.query(text, values).then(
          (result) => affectedOf(result) === 1,
          (error: unknown) => {
            if (errnoOf(error) === DUPLICATE_KEY) return false;
            throw error;
          },
        ),
      of,
    );
  }

  /** `work` in a transaction on a connection of the pool; a failure is a `StoreError`. */
  #transaction<R>(work: (connection: MysqlPoolConnection) => Promise<R>, of: TableOf = 'inbox'): Promise<R> {
    return this.#run(() => inTransaction(this.#pool, work), of);
  }

  /**
   * Runs `attempt`; one that finds its table missing during a `migrate()` runs again once that has settled
   * (`retriedAfterMigration`). `of` says which table it is about, for the message of a missing one.
   */
  #run<R>(attempt: () => Promise<R>, of: TableOf): Promise<R> {
    const missing = (error: unknown) => errnoOf(error) === NO_SUCH_TABLE;
    return retriedAfterMigration(this.#pool, this.table, attempt, missing, (error) =>
      this.#failure(error, of),
    );
  }

  /** The `StoreError` of a failed statement: the driver's error stays the cause (its `errno`, such as 1146). */
  #failure(error: unknown, of: TableOf): StoreError {
    if (error instanceof StoreError) return error;
    if (errnoOf(error) === NO_SUCH_TABLE) {
      const sql = {
        inbox: 'mysqlSchemaSql()',
        audit: 'mysqlMigrations()',
        control: 'mysqlMigrations()',
        claims: 'mysqlMigrations()',
        expectations: 'mysqlExpectationsSql()',
      };
      // A receive reads <table>_claims too (schema version 7): name the table MySQL did not find.
      const claims = mysqlClaimsTable(this.table).split('.').pop()!.slice(1, -1);
      const missed = messageOf(error).includes(`${claims}'`) ? 'claims' : of;
      return missingTable('MysqlStore', this.table, missed, sql, 'MySQL', error);
    }
    const hint =
      errnoOf(error) === INCORRECT_STRING
        ? " (the pool's charset cannot carry this text: create the pool with charset 'UTF8MB4_UNICODE_CI', or leave mysql2's default)"
        : '';
    return new StoreError(`MysqlStore: a query on ${this.table} failed: ${messageOf(error)}${hint}`, {
      cause: error,
    });
  }
}
