import {
  checkKey as checkStoredKey,
  checkLeaseLimit,
  claimTtlMs,
  inboxEntry,
  notMigrated,
  leaseMs as checkedLeaseMs,
  splitKey as splitStoredKey,
  unknownSettlement,
  validDate,
} from '../store-core.js';
import { SqlStore, type SqlDialect } from '../sql-store.js';
import { SqlAudit } from '../sql-audit.js';
import { sqlPauseSwitch } from '../sql-pause-switch.js';
import { randomUUID } from 'node:crypto';
import { messageOf, StoreError } from '../../shared/errors.js';
import { openOrmTransaction } from '../orm-transaction.js';
import type { Statement } from '../transactions.js';
import type {
  DeliveryTransaction,
  DurableStore,
  InboxEntry,
  Lease,
  Settlement,
  PauseSwitch,
} from '../store.js';
import {
  closeQuietly,
  configure,
  connectionTransactions,
  createWriteGate,
  endUnderIterator,
  runStatement,
  statementOf,
  whenNotBusy,
  type SqliteDatabase,
  type WriteGate,
} from './sqlite-connection.js';
import { sqliteExpectations } from './sqlite-expectations.js';
import type { SqlExpectations } from '../sql-expectations.js';
import { SqliteLifecycle } from './sqlite-lifecycle.js';
import { quoteTable, sqliteAuditTable, sqliteInboxSql, type SqliteInboxSql } from './sqlite-sql.js';
import { sqliteSchemaDialect } from './sqlite-schema.js';
import { migrateWorded, type MigrateOptions, type MigrationReport } from '../schema-migrations.js';

/**
 * Options of {@link SqliteStore}.
 * @inline
 */
export interface SqliteStoreOptions<D extends SqliteDatabase = SqliteDatabase> {
  /**
   * Your open database (`new Database('ipn.db')` from better-sqlite3). The store runs its statements on it
   * and never closes it. It puts the file in WAL mode and sets the connection's busy timeout to 0 (see
   * `busyTimeoutMs`): your own writes on this handle fail at once on another process's lock.
   */
  database: D;
  /**
   * Opens another connection to the same file, for delivery transactions (at least once, each attempt
   * runs in one, on its own connection). By default the store opens it as your `database` was:
   * `new (database.constructor)(database.name)`, which better-sqlite3 allows. Give it for `node:sqlite`
   * (`() => new DatabaseSync('ipn.db')`), or to open it with options of your own.
   * @default better-sqlite3's constructor on `database.name`; none for an in-memory database
   */
  connect?: () => D;
  /**
   * The inbox table: letters, digits and underscores. The expectations table is `<table>_expected`.
   * @default 'ipn_inbox'
   */
  table?: string;
  /**
   * How long a write waits for another process's write lock on the file before it fails with a
   * `StoreError` (the router answers 503; the provider resends later). Another process holds it for one
   * statement, or for a delivery transaction: from its start to its commit, its listeners included. The
   * store waits on timers (SQLITE_BUSY retried with a backoff from 1 to 100 ms), not inside SQLite, whose
   * busy timeout it sets to 0: the event loop runs meanwhile. Only a statement of a delivery transaction
   * after its `BEGIN IMMEDIATE` is not retried (the attempt fails whole and is retried later); holding the
   * lock, in WAL mode, it does not meet it. Switching the file to WAL in the constructor waits inside SQLite.
   * @default 5000
   */
  busyTimeoutMs?: number;
}

/**
 * A dedupe store and durable inbox in one SQLite file: the embedded default for an app on one machine,
 * durable across restarts with no database server, shared by every process of the app on that machine.
 * Give it your own better-sqlite3 `Database`; ipn-kit loads no SQLite package.
 *
 * - As a plain store (at most once), `claim` inserts a row in `<table>_claims` (never in the inbox), which
 *   holds the key for the router's `ttlMs`; then a resend is a new notification again. The row stays,
 *   holding nothing, until `purge(before)`.
 * - As a durable inbox (`delivery: 'at-least-once'`), each notification is stored whole, and its delivery
 *   attempts are leased, settled and retried through the table.
 *
 * SQLite has one writer at a time per file: every write is one statement, which holds the file's write lock
 * from its start, so claims, receives and leases are atomic across processes. Times are `Date.now()`
 * milliseconds: every process on the file shares the machine's clock.
 *
 * At least once, each delivery attempt runs in a transaction on a second connection to the file: the
 * listeners get it as `tx` and `db` (your better-sqlite3 `Database` type), and what they write through it
 * commits together with the `delivered` mark, or rolls back with a failed attempt. The transaction holds
 * the file's write lock from its start to its commit, so this process's other writes (receives, leases)
 * wait for it, and other processes' writes wait up to `busyTimeoutMs` (on timers, the event loop free):
 * keep listeners short.
 *
 * @example
 * import Database from 'better-sqlite3';
 * import { ipnRouter } from 'ipn-kit';
 * import { SqliteStore } from 'ipn-kit/sqlite';
 *
 * const store = new SqliteStore({ database: new Database('ipn.db') });
 * store.migrate();
 * const ipn = ipnRouter({ store, delivery: 'at-least-once' });
 * ipn.on('successful', (n, { db }) => {
 *   db.prepare('INSERT INTO ledger (transaction_id, amount) VALUES (?, ?)').run(n.transaction_id, n.amount);
 * });
 * app.use('/ipn', ipn);
 */
export class SqliteStore<D extends SqliteDatabase = SqliteDatabase> extends SqlStore implements DurableStore {
  /** The table, as given. */
  readonly table: string;
  /** Where `ipn.expect()` keeps expected transactions: the table `<table>_expected`, made by `migrate()`. */
  readonly expectations: SqlExpectations;
  /** Operator actions: the table `<table>_audit`, made by `migrate()` (or {@link sqliteAuditSql}). */
  readonly audit: SqlAudit;
  /** Whether delivery is paused for every instance: the row `paused` of `<table>_control`, made by `migrate()`. */
  readonly pauseSwitch: PauseSwitch;
  /** Each transaction's accepted final state: the table `<table>_states`, made by `migrate()`. */
  readonly lifecycle: SqliteLifecycle;
  readonly #database: D;
  readonly #connect: (() => D) | undefined;
  readonly #busyTimeoutMs: number;
  readonly #sql: SqliteInboxSql;
  /** @internal */
  protected readonly dialect: SqlDialect;
  readonly #gate: WriteGate = createWriteGate();
  /** The delivery transactions' connection, opened at the first one; closed when an attempt is abandoned. */
  #txDatabase: D | undefined;
  readonly #transactions: ReturnType<typeof connectionTransactions<D>>;

  /**
   * @throws TypeError when `database` has no `prepare` and `exec` methods, `connect` is not a function, or
   * `table` or `busyTimeoutMs` is not valid.
   * @throws StoreError when the connection cannot be configured (the file is locked past the busy timeout).
   */
  constructor(options: SqliteStoreOptions<D>) {
    super();
    const database: unknown = options?.database;
    if (
      typeof database !== 'object' ||
      database === null ||
      typeof Reflect.get(database, 'prepare') !== 'function' ||
      typeof Reflect.get(database, 'exec') !== 'function'
    ) {
      throw new TypeError(
        "SqliteStore: database must be an open better-sqlite3 Database (new Database('ipn.db')), or an object " +
          `with its prepare(sql) and exec(sql) methods, got ${database === null ? 'null' : typeof database}`,
      );
    }
    const { connect, busyTimeoutMs = 5000 } = options;
    if (connect !== undefined && typeof connect !== 'function') {
      throw new TypeError('SqliteStore: connect must be a function that opens a new connection to the file');
    }
    if (!Number.isFinite(busyTimeoutMs) || busyTimeoutMs < 0) {
      throw new TypeError(`SqliteStore: busyTimeoutMs must be a number of ms, got ${String(busyTimeoutMs)}`);
    }
    this.table = options.table ?? 'ipn_inbox';
    quoteTable(this.table);
    this.#database = database as D;
    this.#connect = connect ?? defaultConnect(database as D);
    this.#busyTimeoutMs = busyTimeoutMs;
    this.#sql = sqliteInboxSql(this.table);
    try {
      configure(this.#database, busyTimeoutMs);
    } catch (error) {
      throw new StoreError(`SqliteStore: could not configure the database: ${messageOf(error)}`, {
        cause: error,
      });
    }
    this.#transactions = connectionTransactions(() => this.#openTxDatabase(), this.#gate, busyTimeoutMs);
    this.expectations = sqliteExpectations(
      {
        read: async (text, values) => this.#run(() => statementOf(this.#database, text).all(...values)),
        write: (text, values) =>
          this.#write(() => Number(statementOf(this.#database, text).run(...values).changes)),
        writeReturning: (text, values) => this.#write(() => statementOf(this.#database, text).all(...values)),
      },
      this.table,
    );
    this.lifecycle = new SqliteLifecycle(
      (text, values) => this.#write(() => statementOf(this.#database, text).all(...values)),
      this.table,
    );
    this.audit = new SqlAudit(
      {
        write: (text, values) => this.#change(text, values),
        read: async (text, values) => (await this.#read(text, values)) as Array<Record<string, unknown>>,
      },
      sqliteAuditTable(this.table),
    );
    const control = `"${this.table}_control"`;
    this.pauseSwitch = sqlPauseSwitch(control, {
      read: (text) => this.#read(text, []),
      write: (value) =>
        this.#change(
          `INSERT INTO ${control} (name, value, updated_ms) VALUES ('paused', ?, ?) ` +
            'ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_ms = excluded.updated_ms',
          [value, Date.now()],
        ),
    });
    const twice = (value: unknown) => [value ?? null, value ?? null];
    this.dialect = {
      owner: 'SqliteStore',
      sql: this.#sql,
      read: (text, values) => this.#read(text, values),
      change: (text, values) => this.#change(text, values),
      checkKey,
      toEntry,
      time: (date) => date.getTime(),
      release: (key, leaseId) => [key, leaseId, leaseId],
      list: (o) => [
        this.#sql.list(o.order === 'newest'),
        [
          ...twice(o.status),
          ...twice(o.transactionId),
          ...twice(o.customDataContains),
          ...twice(o.receivedFrom?.getTime()),
          ...twice(o.receivedBefore?.getTime()),
          o.limit,
          o.offset,
        ],
      ],
      countByStatus: (receivedFrom) => twice(receivedFrom?.getTime()),
      replay: (key, delayMs, from) => {
        const now = Date.now();
        const statuses = from === undefined ? null : from.join(',');
        return [now + Math.round(delayMs), now, key, statuses, statuses];
      },
      replayWith: (key, record, from) => {
        const now = Date.now();
        return [JSON.stringify(record), now, now, key, from.join(','), now];
      },
      stored: (record) => JSON.stringify(record),
    };
  }

  /**
   * {@link SqliteStore.migrate}, saying what it did: the version before and after, and the versions run.
   * It brings the store's tables to the latest schema version: the inbox and its index, `<table>_expected`,
   * `<table>_states` and `<table>_audit`, with the version recorded in `<table>_schema` (the SQL of
   * {@link sqliteMigrations}). Runs each version above the file's in order (a file made before versions is
   * at 0; its rows are kept as they are). Several processes at once take turns: it takes the file's write
   * lock (`BEGIN IMMEDIATE`) before it reads the version. `{ dryRun: true }` runs nothing and says what
   * would run (`ipn-kit migrate --dry-run`).
   * @throws StoreError as `migrate()`.
   */
  async migrateSchema(options?: MigrateOptions): Promise<MigrationReport> {
    const database = this.#database;
    const connection = {
      exec: (sql: string) => whenNotBusy(() => database.exec(sql), this.#busyTimeoutMs),
      rows: (sql: string) => database.prepare(sql).all(),
    };
    const dialect = sqliteSchemaDialect(this.table, connection, (work) => this.#gate.run(work));
    return migrateWorded(dialect, options);
  }

  /**
   * Inserts a row for `key` in `<table>_claims` that holds the key for `ttlMs`, unless the key is claimed,
   * or received in the inbox; a claim whose `ttlMs` has run out is taken over, in the same statement (one
   * writer at a time: of two at once, one wins). The row stays until `purge()`, holding nothing.
   * @throws TypeError unless `ttlMs` is a positive number (a ttl above a century holds the key a century).
   * @returns `true` when this call took the key (or an earlier call with the same `token` did, and its claim
   * is live), `false` when another live claim holds it, or it was received.
   */
  async claim(key: string, ttlMs: number, token: string = randomUUID()): Promise<boolean> {
    splitKey(key);
    const ms = claimTtlMs('SqliteStore', ttlMs);
    return this.#write(() => {
      const now = Date.now();
      const values = [key, token, now, now + ms, key];
      if (Number(statementOf(this.#database, this.#sql.claim).run(...values).changes) === 1) return true;
      return statementOf(this.#database, this.#sql.claimedBy).all(key, token, now).length === 1;
    });
  }

  /** Inserts `record` as `received`, attempts 1, leased to `lease` (until now + `lease.ms`). */
  async receive(key: string, record: Record<string, unknown>, lease: Lease): Promise<boolean> {
    const [transactionId, state] = splitKey(key);
    const ms = leaseMs(lease);
    const json = JSON.stringify(record);
    return this.#write(() => {
      const now = Date.now();
      const values = [key, transactionId, state, json, now, now, now, lease.id, now + ms, key, now];
      return Number(statementOf(this.#database, this.#sql.receive).run(...values).changes) === 1;
    });
  }

  /** Puts the service's `record` in place of the entry `leaseId` holds, in one statement (see `DurableStore`). */
  async replace(
    key: string,
    leaseId: string,
    record: Record<string, unknown>,
    lease: Lease,
  ): Promise<boolean> {
    const ms = leaseMs(lease);
    const json = JSON.stringify(record);
    return this.#write(() => {
      const now = Date.now();
      const values = [json, now, lease.id, now + ms, now, key, leaseId];
      return Number(statementOf(this.#database, this.#sql.replace).run(...values).changes) === 1;
    });
  }

  /** Leases up to `limit` due entries, oldest received first, in one statement: disjoint across processes. */
  async lease(lease: Lease, limit: number): Promise<InboxEntry[]> {
    checkLeaseLimit('SqliteStore', limit);
    const ms = leaseMs(lease);
    if (limit === 0) return [];
    const rows = await this.#write(() => {
      const now = Date.now();
      const values = [lease.id, now + ms, now, now, now, limit];
      return statementOf(this.#database, this.#sql.lease).all(...values);
    });
    return rows.map(toEntry).sort(oldestFirst);
  }

  /** Ends the attempt, only while `leaseId` still holds the entry. */
  async settle(key: string, leaseId: string, settlement: Settlement): Promise<boolean> {
    checkKey(key);
    const [text, values] = this.#settlement(key, leaseId, settlement);
    return (await this.#change(text, values)) === 1;
  }

  /**
   * Opens the transaction of one delivery attempt held by `leaseId`, on the store's second connection to
   * the file (`BEGIN IMMEDIATE`): the listeners get that connection as `tx` and `db`. Its `commit()` marks
   * the entry delivered in the same transaction, only while `leaseId` still holds it, then commits: the
   * listeners' writes and the mark land together or not at all, whatever crashes when. One transaction at
   * a time per store; this process's other writes wait for it. Resolves `undefined` for an in-memory
   * database without `connect` (no second connection can reach it).
   */
  async begin(key: string, leaseId: string): Promise<DeliveryTransaction<D, D> | undefined> {
    checkKey(key);
    if (this.#connect === undefined) return undefined;
    // `delivered_at` is the time of the commit, not of the begin: the values are read when the mark runs.
    const mark: Statement = {
      text: this.#sql.delivered,
      get values() {
        const now = Date.now();
        return [now, now, key, leaseId];
      },
      returns: 'count',
    };
    const opened = await openOrmTransaction(this.#transactions, key, mark);
    const abandon = (listeners: Promise<unknown>) => {
      // The listeners may still run: closing the connection rolls the transaction back now, and refuses
      // their late writes; the store's other writes go on without waiting for them.
      const connection = this.#txDatabase;
      if (this.#closeTxDatabase() || connection === undefined) return this.#transactions.abandon();
      // It cannot close: a listener's statement still runs on it (an open iterator). Rolled back now and
      // read-only, it is set aside (the next attempt opens another), and closed once the listeners settle.
      const settled = listeners.then(
        () => undefined,
        () => undefined,
      );
      if (endUnderIterator(connection)) {
        this.#txDatabase = undefined;
        void settled.then(() => closeQuietly(connection));
        return this.#transactions.abandon();
      }
      // A driver that refuses even that: the transaction keeps its turn until the listeners settle and its
      // connection closes (which rolls it back), so the store's writes wait for it in the gate, instead of
      // meeting its lock inside SQLite, which would block the event loop for busyTimeoutMs and then fail.
      this.#transactions.abandon(settled.then(() => void this.#closeTxDatabase()));
    };
    return {
      tx: opened.tx,
      db: opened.tx,
      get state() {
        return opened.state;
      },
      commit: () => opened.commit(),
      rollback: (listeners) => {
        if (listeners !== undefined && opened.state === 'open') abandon(listeners);
        return opened.rollback(listeners);
      },
    };
  }

  /** Closes the delivery transactions' connection, once no transaction is open. Your `database` stays open. */
  async close(): Promise<void> {
    await this.#gate.run(() => void this.#closeTxDatabase());
  }

  #settlement(key: string, leaseId: string, settlement: Settlement): [string, unknown[]] {
    const now = Date.now();
    switch (settlement?.status) {
      case 'delivered':
        return [this.#sql.delivered, [now, now, key, leaseId]];
      case 'failed': {
        const next = validDate('SqliteStore.settle: nextAttemptAt', settlement.nextAttemptAt).getTime();
        return [this.#sql.failed, [String(settlement.error), next, now, key, leaseId]];
      }
      case 'dead':
        return [this.#sql.dead, [String(settlement.error), now, key, leaseId]];
      default:
        throw unknownSettlement('SqliteStore', settlement);
    }
  }

  #openTxDatabase(): D {
    // better-sqlite3's `open` is false once closed (by a listener holding the connection itself, say).
    if (this.#txDatabase === undefined || Reflect.get(this.#txDatabase, 'open') === false) {
      const opened = this.#connect!();
      configure(opened, this.#busyTimeoutMs);
      this.#txDatabase = opened;
    }
    return this.#txDatabase;
  }

  /** Closes the delivery transactions' connection; `false` when it is busy (a statement still runs on it). */
  #closeTxDatabase(): boolean {
    const open = this.#txDatabase;
    try {
      open?.close();
    } catch (error) {
      // Already closed: nothing to release. Busy: it stays this store's, rolled back once its listeners settle.
      if (/busy/i.test(messageOf(error))) return false;
    }
    this.#txDatabase = undefined;
    return true;
  }

  /** A statement that changes rows, in its turn (see `WriteGate`); resolves how many it changed. */
  #change(text: string, values: unknown[]): Promise<number> {
    return this.#write(() => runStatement(this.#database, { text, values, returns: 'count' }).count);
  }

  /** A statement that reads rows: at once, as readers never wait for the writer in WAL mode. */
  #read(text: string, values: unknown[]): Promise<unknown[]> {
    return this.#run(() => statementOf(this.#database, text).all(...values));
  }

  /** `work` (synchronous statements on the store's connection) once no delivery transaction is open. */
  #write<T>(work: () => T): Promise<T> {
    return this.#gate.run(() => this.#attempt(work));
  }

  /** `work` as a promise: a failure rejects it, as every store method's does, instead of throwing. */
  #run<T>(work: () => T): Promise<T> {
    return Promise.resolve().then(() => this.#attempt(work));
  }

  /**
   * Runs `work`, again while another process's write lock makes it fail with SQLITE_BUSY, on timers, up to
   * `busyTimeoutMs` (see `whenNotBusy`: each of the store's statements runs in autocommit, so a busy one
   * changed nothing). A failure is a `StoreError` (`notMigrated` when a table is missing).
   */
  async #attempt<T>(work: () => T): Promise<T> {
    try {
      return await whenNotBusy(work, this.#busyTimeoutMs);
    } catch (error) {
      throw this.#failure(error);
    }
  }

  #failure(error: unknown): StoreError {
    const message = messageOf(error);
    const missing = /no such table: (?:main\.)?(\S+)/.exec(message)?.[1];
    if (missing !== undefined) {
      return notMigrated('SqliteStore', missing, 'sqliteSchemaSql()', 'SQLite', error);
    }
    return new StoreError(`SqliteStore: a statement on ${this.table} failed: ${message}`, { cause: error });
  }
}

/**
 * How the store opens a second connection by default: better-sqlite3's `Database` keeps its file's path in
 * `name`, and its constructor is the object's own. `undefined` for an in-memory or temporary database
 * (another connection would open another database) or a driver that keeps no path.
 */
function defaultConnect<D extends SqliteDatabase>(database: D): (() => D) | undefined {
  const name: unknown = Reflect.get(database, 'name');
  const memory: unknown = Reflect.get(database, 'memory');
  const Construct = (database as { constructor?: unknown }).constructor;
  if (typeof name !== 'string' || name === '' || name === ':memory:' || memory === true) return undefined;
  if (typeof Construct !== 'function' || Construct === Object) return undefined;
  return () => new (Construct as new (path: string) => D)(name);
}

/** `transaction_id:state`, checked and split at the last `:`. */
const splitKey = (key: string): [string, string] => splitStoredKey('SqliteStore', key);

/** A key SQLite keeps exactly: no NUL, no lone surrogate (the driver writes UTF-8). */
const checkKey = (key: string): string => checkStoredKey('SqliteStore', key);

const leaseMs = (lease: Lease): number => checkedLeaseMs('SqliteStore', lease);

/** A row as an `InboxEntry`: times are milliseconds, the record JSON text. */
const toEntry = (row: unknown): InboxEntry =>
  inboxEntry(row, { record: (stored) => JSON.parse(stored as string) as Record<string, unknown> });

/** The delivery order: oldest received first, then by key (as the lease statement picks them). */
function oldestFirst(a: InboxEntry, b: InboxEntry): number {
  return a.receivedAt.getTime() - b.receivedAt.getTime() || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0);
}
