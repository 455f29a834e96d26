import { checkLeaseLimit, claimTtlMs } from '../store-core.js';
import { missingTable, SqlStore, type SqlDialect, type TableOf } from '../sql-store.js';
import { randomUUID } from 'node:crypto';
import {
  checkKey,
  checkToken,
  leaseMs,
  settleQuery,
  splitKey,
  toEntry,
  toStoredJson,
} from './postgres-rows.js';
import {
  claimsTable,
  inboxSql,
  inline,
  NOT_READ_COMMITTED,
  receivesJson,
  RESET,
  TRANSACTION_STATUS,
  tableNames,
  type InboxSql,
} from './postgres-sql.js';
import { postgresControlTable, postgresSchemaDialect } from './postgres-schema.js';
import { migrateWorded, type MigrateOptions, type MigrationReport } from '../schema-migrations.js';
import { BatchStall, createBatcher } from '../batcher.js';
import {
  canConnect,
  explainPostgres,
  openTransaction,
  splitStatements,
  type PgClientOf,
} from './postgres-transaction.js';
import { Landed, openOrmTransaction, type Run } from '../orm-transaction.js';
import { guardCheckouts } from '../guard-checkouts.js';
import { isTransactions, type Statement, type StatementResult, type Transactions } from '../transactions.js';
import { postgresExpectations } from './postgres-expectations.js';
import type { SqlExpectations } from '../sql-expectations.js';
import { PostgresAudit } from './postgres-audit.js';
import { sqlPauseSwitch } from '../sql-pause-switch.js';
import { PostgresLifecycle } from './postgres-lifecycle.js';
import { retriedAfterMigration, trackMigration } from './postgres-migrations.js';
import { messageOf, StoreError } from '../../shared/errors.js';
import type {
  DeliveryTransaction,
  DurableStore,
  InboxEntry,
  Lease,
  Settlement,
  PauseSwitch,
} from '../store.js';

/**
 * What a query resolves: the part of `pg`'s `QueryResult` the store reads.
 * @inline
 */
export interface PgQueryResult {
  rows: unknown[];
  rowCount: number | null;
}

/**
 * The part of a `pg` `Pool` (or `Client`) the store uses. Declared here so that ipn-kit's types never name
 * the `pg` package.
 */
export interface PgQueryable {
  /** Runs one parameterised statement (`$1`, `$2`, ... bound to `values`). */
  query(text: string, values?: unknown[]): Promise<PgQueryResult>;
}

/**
 * Options of {@link PostgresStore}.
 * @inline
 */
export interface PostgresStoreOptions<
  P extends PgQueryable = PgQueryable,
  T extends Transactions<any> | undefined = undefined, // eslint-disable-line @typescript-eslint/no-explicit-any
> {
  /**
   * Your `pg` pool (`new Pool()`). The store only runs queries through it; it never ends it. Listen to its
   * `error` event, as `pg` asks: without a listener, a dropped idle connection crashes the process.
   * Required, unless `transactions` can run statements on their own (`execute`): then the store runs
   * through your ORM alone. At least once without `transactions`, a delivery attempt whose listeners query
   * `db` takes one client of it (`pool.connect()`) for its transaction, from that first query to its
   * commit, so size `max` for those concurrent deliveries plus the receives. A single `Client` works too,
   * without transactional delivery (listeners get no `db`).
   */
  pool: P;
  /**
   * Your ORM's transactions (`prismaTransactions(prisma)`, `drizzleTransactions(db)`, ... from
   * `ipn-kit/orm`): at least once, each delivery attempt runs in a transaction of your ORM, listeners write
   * through its transaction object (their context's `tx`), and the store marks the entry delivered inside
   * it. Point the ORM at the same database as `pool`.
   * @default undefined: delivery transactions on `pool`'s clients, as `db`
   */
  transactions?: T;
  /**
   * With `transactions`: what a delivery leaves of the session's settings. Either way, none a listener sets
   * through `tx` outlives its delivery (`SET`, `set_config(..., false)`, custom variables such as
   * `app.tenant_id`, `SET ROLE`): `RESET ALL` runs before the mark, and the session authorization and role go
   * back. `'restore'` also sets back what the session had set before the delivery (your pool's `connect`
   * event, Knex's `searchPath`, the pooler's `application_name`), which costs every delivery one reading of
   * `pg_settings`. `'reset'` skips that reading: those go back to what the connection started with (its
   * startup parameters, the role's and database's settings). For a partner
   * whose connections set nothing at session level, such as those behind a transaction-mode pooler. See
   * docs/hosted-postgres.md.
   * @default 'restore'
   */
  sessionSettings: 'restore' | 'reset';
  /**
   * The inbox table: `name` or `schema.name`, of letters, digits and underscores. It is quoted, so it is
   * case-sensitive.
   * @default 'ipn_inbox'
   */
  table: string;
}

/** The listeners' `tx` of a store: the ORM's transaction, or the pool's client. */
type TxOf<P, T> = T extends Transactions<infer Tx> ? Tx : PgClientOf<P>;
/** The listeners' `db` of a store: the pool's client, or none with an ORM's transactions. */
type DbOf<P, T> = T extends Transactions<unknown> ? never : PgClientOf<P>;

/** One write of a batch: a receive's values (`receive`), or a `delivered` settlement's key and lease. */
type Write = { receive: unknown[]; delivered?: never } | { receive?: never; delivered: [string, string] };

/** `[[key, lease], ...]` as `[[key, ...], [lease, ...]]`. */
const transpose = (pairs: Array<[string, string]>): [string[], string[]] => [
  pairs.map(([key]) => key),
  pairs.map(([, lease]) => lease),
];

/**
 * The refusal of the removed option `groupDeliveries`: a store that took it and ignored it would leave its
 * caller believing it on.
 */
const GROUPS_REMOVED =
  'PostgresStore: groupDeliveries was removed (shared delivery transactions were no faster end to end: ' +
  '665 notifications/s against 681/s without; see CHANGELOG.md). Each delivery runs in a transaction of ' +
  'its own, as by default: remove the option';

/** PostgreSQL's "undefined_table" error code. */
const UNDEFINED_TABLE = '42P01';

/**
 * A dedupe store and durable inbox in PostgreSQL, shared by every instance of your app. A notification's row
 * is keyed by `transaction_id:state`: the primary key makes a claim (or a receive) atomic across instances.
 *
 * - As a plain store (the router's default, at-most-once mode), `claim` inserts a row in `<table>_claims`
 *   (never in the inbox), which holds the key for the router's `ttlMs` (by the database's clock); then a
 *   resend is a new notification again. The row stays, holding nothing, until `purge(before)` (or
 *   `ipn-kit inbox purge --before <date>`).
 * - As a durable inbox (`delivery: 'at-least-once'`), each notification is stored whole, and its delivery
 *   attempts are leased, settled and retried through the table.
 *
 * Create the table once with {@link PostgresStore.migrate} (safe to run on every start, from every instance
 * at once), or with {@link postgresSchemaSql} (or each version's SQL, {@link postgresMigrations}) in your own migrations. Every time comparison uses the
 * database's clock. Give it your own `pg` pool; ipn-kit loads no PostgreSQL package, and `ipn.close()` leaves
 * the pool open.
 *
 * With `delivery: 'at-least-once'` over a `Pool`, each delivery attempt runs in a transaction: the
 * listeners get its client as `db`, and what they write through it commits together with the `delivered`
 * mark, or rolls back with a failed attempt (see {@link PostgresStore.begin}).
 *
 * @example
 * import { Pool } from 'pg';
 * import { ipnRouter } from 'ipn-kit';
 * import { PostgresStore } from 'ipn-kit/postgres';
 *
 * const pool = new Pool({ connectionString: process.env.DATABASE_URL });
 * pool.on('error', (error) => logger.error(error)); // a dropped idle connection, reported instead of a crash
 * const store = new PostgresStore({ pool });
 * await store.migrate();
 * const ipn = ipnRouter({ store, delivery: 'at-least-once' });
 * ipn.on('successful', async (n, { db }) => {
 *   await db.query('INSERT INTO ledger (transaction_id, amount) VALUES ($1, $2)', [n.transaction_id, n.amount]);
 * });
 * app.use('/ipn', ipn);
 */
export class PostgresStore<
  P extends PgQueryable = PgQueryable,
  T extends Transactions<any> | undefined = undefined, // eslint-disable-line @typescript-eslint/no-explicit-any
>
  extends SqlStore
  implements DurableStore
{
  /** The table, as given. */
  readonly table: string;
  /** Where `ipn.expect()` keeps expected transactions: the table `<table>_expected`, made by `migrate()`. */
  readonly expectations: SqlExpectations;
  /** Operator actions: the table `<table>_audit`, made by `migrate()` (or {@link postgresAuditSql}). */
  readonly audit: PostgresAudit;
  /** Whether delivery is paused for every instance: the row `paused` of `<table>_control`, made by `migrate()`. */
  readonly pauseSwitch: PauseSwitch;
  /** Each transaction's accepted final state: the table `<table>_states`, made by `migrate()`. */
  readonly lifecycle: PostgresLifecycle;
  readonly #pool: PgQueryable;
  /** The pool over the ORM alone (no `pool` given), which runs several statements in one of its transactions. */
  readonly #ormPool: OrmPool | undefined;
  readonly #transactions: Transactions | undefined;
  /** `sessionSettings: 'restore'`: the ORM path sets back the session's own settings after its reset. */
  readonly #keepSettings: boolean;
  readonly #sql: InboxSql;
  /** @internal */
  protected readonly dialect: SqlDialect;
  /**
   * Whether the exactly-once mark calls the function `<table>_mark` (schema version 6): cleared when the
   * database has none (its own migrations stopped earlier) or the role may not run it (EXECUTE revoked), so
   * the mark goes as a `DO` block, as before it.
   */
  #markFunction = true;
  /**
   * Whether receives take their lock first (`locked`, after `lockInbox`): set once a receive found its
   * session's isolation not READ COMMITTED (a partner's `default_transaction_isolation`), for good.
   */
  #lockFirst = false;
  /** How long a batch stuck on its connection holds its place: the routers' shortest `storeTimeoutMs`. */
  readonly #stall = new BatchStall();
  /** Receives and `delivered` settlements that arrive together go as one statement (group commit). */
  readonly #writes = createBatcher((items: Write[]) => this.#writeMany(items), {
    stallMs: this.#stall.ms,
  });

  /**
   * @throws TypeError when `pool` has no `query` method (and `transactions` cannot run statements on their
   * own), `transactions` is not a `Transactions`, `sessionSettings` is neither `'restore'` nor `'reset'`,
   * `table` is not a valid name, or given `groupDeliveries` (removed: see the CHANGELOG).
   */
  constructor(
    options: Partial<PostgresStoreOptions<P, T>> &
      (Pick<PostgresStoreOptions<P, T>, 'pool'> | { transactions: T & Transactions }),
  ) {
    super();
    const given = options as Partial<PostgresStoreOptions<P, T>> | undefined;
    if (Reflect.get(Object(given), 'groupDeliveries') !== undefined) throw new TypeError(GROUPS_REMOVED);
    const transactions: unknown = given?.transactions;
    if (transactions !== undefined && !isTransactions(transactions)) {
      throw new TypeError(
        'PostgresStore: transactions must come from ipn-kit/orm (prismaTransactions(prisma), drizzleTransactions(db), ...), or be an object with transaction(work) and query(tx, statement)',
      );
    }
    this.#ormPool = given?.pool === undefined && transactions?.execute ? ormPool(transactions) : undefined;
    const pool = given?.pool ?? this.#ormPool;
    if (typeof pool !== 'object' || pool === null || typeof Reflect.get(pool, 'query') !== 'function') {
      throw new TypeError(
        'PostgresStore: pool must be a pg Pool (new Pool() from the pg package), or an object with its query(text, values) method' +
          (transactions
            ? `; ${transactions.name}'s transactions cannot run statements on their own (no execute)`
            : ''),
      );
    }
    this.table = tableNames(given?.table ?? 'ipn_inbox').name;
    this.#pool = pool;
    this.#transactions = transactions;
    const sessionSettings: unknown = given?.sessionSettings ?? 'restore';
    if (sessionSettings !== 'restore' && sessionSettings !== 'reset') {
      throw new TypeError(
        `PostgresStore: sessionSettings must be 'restore' or 'reset', got ${JSON.stringify(sessionSettings) ?? typeof sessionSettings}`,
      );
    }
    this.#keepSettings = sessionSettings === 'restore';
    // An ORM's delivery transaction holds a client of this pool with no `error` listener of its own (Kysely):
    // a server ending it must fail the attempt, not the process.
    if (transactions) guardCheckouts(given?.pool);
    this.#sql = inboxSql(this.table);
    this.audit = new PostgresAudit((text, values) => this.#query(text, values, 'audit'), this.table);
    const control = postgresControlTable(this.table);
    this.pauseSwitch = sqlPauseSwitch(control, {
      read: async (text) => (await this.#query(text, [], 'control')).rows,
      write: (value) =>
        this.#query(
          `INSERT INTO ${control} (name, value) VALUES ('paused', $1) ON CONFLICT (name) DO UPDATE ` +
            'SET value = EXCLUDED.value, updated_at = now()',
          [value],
          'control',
        ),
    });
    this.expectations = postgresExpectations(
      (text, values) => this.#query(text, values, 'expectations'),
      this.table,
    );
    this.lifecycle = new PostgresLifecycle(
      (text, values) => this.#query(text, values),
      this.table,
      this.#stall.ms,
    );
    this.dialect = {
      owner: 'PostgresStore',
      sql: this.#sql,
      read: async (text, values) => (await this.#query(text, values)).rows,
      change: async (text, values) => (await this.#query(text, values)).rowCount ?? 0,
      checkKey,
      toEntry,
      time: (date) => date,
      release: (key, leaseId) => [key, leaseId],
      list: (o) => [
        this.#sql.list(o.order === 'newest'),
        [
          o.limit,
          o.offset,
          o.status ?? null,
          o.transactionId ?? null,
          o.customDataContains ?? null,
          o.receivedFrom ?? null,
          o.receivedBefore ?? null,
        ],
      ],
      countByStatus: (receivedFrom) => [receivedFrom ?? null],
      replay: (key, delayMs, from) => [key, Math.round(delayMs), from === undefined ? null : [...from]],
      replayWith: (key, record, from) => [key, toStoredJson(record), [...from]],
    };
  }

  /**
   * {@link PostgresStore.migrate}, saying what it did: the version before and after, and the versions run.
   * It brings the store's tables to the latest schema version: the inbox and its index, `<table>_expected`,
   * `<table>_states` and `<table>_audit`, with the version recorded in `<table>_schema`. Runs each version
   * above the database's in order (a database made by ipn-kit 0.1.0, before versions, is at 0; its rows are
   * kept as they are). Several processes at once take turns on an advisory lock. `{ dryRun: true }` runs
   * nothing and says what would run (`ipn-kit migrate --dry-run`).
   * @throws StoreError as `migrate()`.
   */
  async migrateSchema(options?: MigrateOptions): Promise<MigrationReport> {
    // Recorded at once, before any await: a query of the router's first recovery pass that finds no table
    // meanwhile waits for it and runs again (see postgres-migrations.ts), so the documented start logs no
    // missing table.
    let report: MigrationReport | undefined;
    await trackMigration(this.#pool, this.table, async () => {
      // The text alone, with no values: pg sends it as a simple query, which may hold several statements.
      const dialect = postgresSchemaDialect(this.table, (text) => this.#pool.query(text));
      const hint =
        ' (the role needs CREATE on the schema; or create it with the SQL of postgresSchemaSql() in your migrations)';
      report = await migrateWorded(dialect, options, hint);
    });
    if (options?.dryRun !== true) this.#markFunction = true; // made by version 6, if it was missing
    return report!;
  }

  /**
   * Inserts a row for `key` in `<table>_claims` that holds the key for `ttlMs` (by the database's clock),
   * unless the key is claimed, or received in the inbox; a claim whose `ttlMs` has run out is taken over,
   * in the same statement (two at once: one wins). The row stays until `purge()`, holding nothing.
   * @returns `true` when this call took the key (or an earlier call with the same `token` did, and its claim
   * is live), `false` when the key was claimed by another live claim, or received.
   * @throws TypeError unless `ttlMs` is a positive number (a ttl above a century holds the key a century),
   * or when `token` is not a string a `text` column holds exactly (no NUL, no lone surrogate).
   */
  async claim(key: string, ttlMs: number, token: string = randomUUID()): Promise<boolean> {
    splitKey(key);
    const text = this.#sql.claim(
      key,
      checkToken(token),
      claimTtlMs('PostgresStore', ttlMs),
      this.#stall.ms(),
    );
    // Three statements (the lock's timeout, the lock, the claim) as one simple query: pg answers with a
    // result for each.
    const answered: unknown = await this.#query(text, [], 'claims').catch((error: unknown) => {
      throw claimRefused(error, this.table);
    });
    const rows: unknown = Reflect.get(Object(Array.isArray(answered) ? answered.at(-1) : answered), 'rows');
    const claimed: unknown = Array.isArray(rows) ? Reflect.get(Object(rows[0]), 'claimed') : undefined;
    if (typeof claimed !== 'boolean') {
      // Never read as a resend: a notification dropped on an answer misread would be lost.
      throw new StoreError(`PostgresStore: a claim on ${this.table} was answered without its row`);
    }
    return claimed;
  }

  /** Inserts `record` as `received`, attempts 1, leased to `lease` (until the database's now + `lease.ms`). */
  async receive(key: string, record: Record<string, unknown>, lease: Lease): Promise<boolean> {
    const [transactionId, state] = splitKey(key);
    const ms = leaseMs(lease);
    return this.#writes({ receive: [key, transactionId, state, toStoredJson(record), lease.id, ms] });
  }

  /**
   * One batch of receives and `delivered` settlements: one statement (`unnest`), one commit. A key received
   * twice in one batch is inserted once, and only its first caller is told so; each settlement is guarded
   * by its own lease. A failed batch rejects every caller: each receive answers 503, each settlement is
   * reported and its entry taken up again once its lease runs out.
   */
  async #writeMany(items: Write[]): Promise<boolean[]> {
    if (items.length === 1) {
      const [item] = items as [Write];
      if (item.delivered) return [(await this.#query(this.#sql.delivered, item.delivered)).rowCount === 1];
      return [(await this.#received('receive', item.receive)).rowCount === 1];
    }
    const first = new Map<string, number>(); // each received key's first caller
    const settling: Array<[string, string]> = [];
    items.forEach((item, index) => {
      if (item.receive && !first.has(item.receive[0] as string)) first.set(item.receive[0] as string, index);
      if (item.delivered) settling.push(item.delivered);
    });
    const receives = [...first.values()].map((index) => items[index]!.receive!);
    const received = receives.length === 0 ? [] : [receivesJson(receives)];
    const values = settling.length === 0 ? received : [...received, ...transpose(settling)];
    const { rows } =
      receives.length === 0
        ? await this.#query(this.#sql.deliveredMany, values)
        : await this.#received(settling.length === 0 ? 'receiveMany' : 'receiveAndDeliverMany', values);
    const done = new Set(
      (rows as Array<{ key: string; lease_id: string | null }>).map(
        (row) => `${row.lease_id ?? ''} ${row.key}`,
      ),
    );
    return items.map((item, index) =>
      item.receive
        ? first.get(item.receive[0] as string) === index && done.has(` ${item.receive[0] as string}`)
        : done.has(`${item.delivered[1]} ${item.delivered[0]}`),
    );
  }

  /** Puts the service's `record` in place of the entry `leaseId` holds, in one statement (see `DurableStore`). */
  async replace(
    key: string,
    leaseId: string,
    record: Record<string, unknown>,
    lease: Lease,
  ): Promise<boolean> {
    const ms = leaseMs(lease);
    const values = [key, leaseId, toStoredJson(record), lease.id, ms];
    return (await this.#query(this.#sql.replace, values)).rowCount === 1;
  }

  /**
   * Leases up to `limit` due entries, oldest received first, in one statement (`FOR UPDATE SKIP LOCKED`):
   * instances leasing at the same time get disjoint entries.
   */
  async lease(lease: Lease, limit: number): Promise<InboxEntry[]> {
    checkLeaseLimit('PostgresStore', limit);
    const ms = leaseMs(lease);
    if (limit === 0) return [];
    const { rows } = await this.#query(this.#sql.lease, [lease.id, ms, limit]);
    return rows.map(toEntry);
  }

  /** Ends the attempt, only while `leaseId` still holds the entry. A failure's `nextAttemptAt` is stored as given. */
  async settle(key: string, leaseId: string, settlement: Settlement): Promise<boolean> {
    checkKey(key);
    if (settlement?.status === 'delivered') return this.#writes({ delivered: [key, leaseId] });
    const { rowCount } = await this.#query(...settleQuery(this.#sql, key, leaseId, settlement));
    return rowCount === 1;
  }

  /**
   * Opens the transaction of one delivery attempt held by `leaseId` (the router calls it, at least once,
   * after verification and before the listeners). Its `commit()` marks the entry delivered in the same
   * transaction, only while `leaseId` still holds it (otherwise it rolls back: another attempt has the
   * entry), then commits. So the listeners' writes and the mark land together or not at all, whatever
   * crashes when.
   *
   * With `transactions`, your ORM opens it, and listeners get the ORM's transaction object as `tx`.
   * Without, listeners get a client of the pool as `tx` and `db`: the first query they make through it
   * takes the client and sends `BEGIN` on it; when no listener queried it, there is nothing to make atomic
   * and no client was taken: the mark is batched with other settlements (group commit), as without a
   * transaction. Resolves `undefined` when the pool hands out no clients (a single `Client`).
   */
  begin(key: string, leaseId: string): Promise<DeliveryTransaction<TxOf<P, T>, DbOf<P, T>> | undefined> {
    type Opened = DeliveryTransaction<TxOf<P, T>, DbOf<P, T>>;
    if (this.#transactions) {
      // The opening reads the session's settings before any listener runs. Before the mark, RESET ALL undoes
      // whatever a listener set through `tx` (a plain SET would outlive the COMMIT, and reach the next client
      // of a transaction-mode pooler), custom variables too; the mark, in its own statement, sets back what
      // the session had set before the delivery (with sessionSettings: 'reset', its authorization and role).
      const opening: Statement = {
        text: this.#sql.ormOpening(this.#keepSettings),
        values: [],
        returns: 'rows',
      };
      const mark = async ({ rows }: StatementResult, run: Run): Promise<Statement> => {
        const { xid, settings, schema } = rows[0] ?? {};
        await run({ text: RESET, values: [], returns: 'count' });
        return {
          text: this.#sql.deliveredInOrm(typeof schema === 'string' ? schema : undefined),
          values: [
            key,
            leaseId,
            String(xid),
            typeof settings === 'string' ? settings : JSON.stringify(settings),
          ],
          returns: 'rows',
        };
      };
      const outcome = (result: StatementResult) => markedInOrm(result, key, this.#transactions!.name);
      const committed = (status: unknown) => (status === 'committed' ? 'a raw COMMIT' : undefined);
      const landed = async ({ rows }: StatementResult, run: Run): Promise<string | undefined> => {
        const asked: Statement = {
          text: TRANSACTION_STATUS,
          values: [String(rows[0]?.xid)],
          returns: 'rows',
        };
        // Not askable in an aborted transaction (the listener's own statement failed, maybe in one it began
        // with a raw BEGIN after committing the delivery's): then asked by landedAfter, below.
        return committed((await run(asked)).rows[0]?.status);
      };
      // Once the ORM's transaction has ended (rolled back, or committed by a listener), the delivery
      // transaction's id stands committed or aborted: asked on the store's own connection when it could not
      // be asked through tx (an aborted transaction; a Prisma transaction closed on its timeout refuses every
      // query; a lost connection).
      const landedAfter = async ({ rows }: StatementResult): Promise<string | undefined> => {
        const asked = await this.#pool.query(TRANSACTION_STATUS, [String(rows[0]?.xid)]);
        return committed((asked.rows[0] as { status?: unknown } | undefined)?.status);
      };
      return openOrmTransaction(this.#transactions, key, mark, {
        explain: explainPostgres,
        outcome,
        opening,
        landed,
        landedAfter,
      }) as Promise<Opened>;
    }
    if (!canConnect(this.#pool)) return Promise.resolve(undefined);
    const statement: [string, unknown[]] = [this.#sql.delivered, [key, leaseId]];
    const markWithout = () => this.#writes({ delivered: [key, leaseId] });
    const mark = {
      statement,
      andCommit: (before: string) => this.#sql.markAndCommit(key, leaseId, this.#markFunction, before),
      functionUnusable: () => {
        this.#markFunction = false;
      },
    };
    return openTransaction(this.#pool, key, mark, markWithout) as Promise<Opened>;
  }

  /** Does nothing: the pool is yours, and other parts of your app may still use it. End it yourself. */
  close(): void {}

  /**
   * The router's `storeTimeoutMs` (it calls this; several routers on one store: the shortest wins). A group
   * commit batch stuck that long on its connection (a network partition) gives up its place, so that the
   * receives behind it are sent on their own instead of queueing until the router answers them 503.
   */
  useStoreTimeout(storeTimeoutMs: number): void {
    this.#stall.use(storeTimeoutMs);
  }

  /**
   * Every query of the store; a failure is a `StoreError`. One that finds its table missing during a
   * `migrate()` runs again once that has settled (`retriedAfterMigration`). `of` says which table the query
   * is about, for the message of a missing one.
   */
  #query(text: string, values: unknown[], of: TableOf = 'inbox'): Promise<PgQueryResult> {
    const attempt = () => this.#pool.query(text, values);
    return retriedAfterMigration(this.#pool, this.table, attempt, missing, (error) =>
      this.#failure(error, of),
    );
  }

  /**
   * Runs the statement `kind` that inserts into the inbox, and resolves its result (see `receiveStatements`).
   * A receive that waited for a claim's lock must not run with a snapshot from before the claim, or both
   * would be first. Under READ COMMITTED, PostgreSQL's default, its snapshot comes after its lock: it goes
   * as it is, one parameterised statement, at the cost of a one-time filter. Under another isolation (a
   * `default_transaction_isolation` of the partner's database or role) the statement finds it out itself
   * and fails having written nothing (`NOT_READ_COMMITTED`, one error in PostgreSQL's log): it goes again
   * after `LOCK TABLE <inbox> IN ROW EXCLUSIVE MODE`, and so does every later one of the store.
   */
  async #received(
    kind: 'receive' | 'receiveMany' | 'receiveAndDeliverMany',
    values: unknown[],
  ): Promise<PgQueryResult> {
    if (!this.#lockFirst) {
      try {
        return await this.#query(this.#sql[kind], values);
      } catch (error) {
        if (codeOf(Reflect.get(Object(error), 'cause')) !== NOT_READ_COMMITTED) throw error;
        this.#lockFirst = true; // the statement failed: nothing was written
      }
    }
    return this.#insert(this.#sql.locked[kind], values);
  }

  /**
   * A statement that inserts into the inbox, after `LOCK TABLE <inbox> IN ROW EXCLUSIVE MODE` in the same
   * transaction (see `lockInbox`): a utility statement that takes no snapshot, so that under REPEATABLE READ
   * the insert's snapshot sees a claim it waited for. On a pool, both go as one simple query (one round
   * trip, one implicit transaction), the values as literals; through the ORM alone, as two statements in one
   * of its transactions, the values as parameters (an ORM may read a `$1` or `?` inside a literal as a
   * placeholder). Resolves the insert's result, never the lock's.
   */
  #insert(text: string, values: unknown[]): Promise<PgQueryResult> {
    const lock = this.#sql.lockInbox;
    const orm = this.#ormPool;
    const attempt = orm
      ? () => orm.inTransaction([lock, text], [[], values])
      : async () => lastResult(await this.#pool.query(`${lock}; ${inline(text, values)}`, []), this.table);
    return retriedAfterMigration(this.#pool, this.table, attempt, missing, (error) =>
      this.#failure(error, 'inbox'),
    );
  }

  /** The `StoreError` of a failed query: the driver's error stays the cause (its `code`, such as 57P01). */
  #failure(error: unknown, of: TableOf): StoreError {
    if (missing(error)) {
      // pg's own message (relation "ipn_inbox" does not exist) does not say what to do about it; it is kept
      // at the end, as it names the relation PostgreSQL looked for (the search_path decides where).
      const sql = {
        inbox: 'postgresSchemaSql()',
        audit: 'postgresAuditSql()',
        control: 'postgresMigrations()',
        claims: 'postgresMigrations()',
        expectations: 'postgresExpectationsSql()',
      };
      // A receive reads <table>_claims too (schema version 7): name the table PostgreSQL did not find.
      const claims = claimsTable(this.table).split('.').pop()!.slice(1); // name" (PostgreSQL quotes it)
      const missed = messageOf(error).includes(claims) ? 'claims' : of;
      return missingTable('PostgresStore', this.table, missed, sql, 'PostgreSQL', error);
    }
    return new StoreError(`PostgresStore: a query on ${this.table} failed: ${messageOf(error)}`, {
      cause: error,
    });
  }
}

/**
 * A pool over your ORM: each query runs through `transactions.execute`, as one statement outside any
 * transaction. A text of several statements (the migration's, a claim's) runs in one transaction of the ORM,
 * one by one, and answers with the last one's result.
 */
function ormPool(transactions: Transactions): OrmPool {
  const execute = transactions.execute!.bind(transactions);
  const returns = (text: string): Statement['returns'] =>
    /^\s*(select|with)\b|\breturning\b/i.test(text) ? 'rows' : 'count';
  const inTransaction = async (texts: string[], values: unknown[][]): Promise<PgQueryResult> => {
    // As pg answers a simple query of several statements: the last one's result is the claim's. Only
    // the last is asked for rows: the others (the migration's `SELECT pg_advisory_xact_lock(...)`,
    // a void) are run for their effect, as Prisma's $queryRawUnsafe cannot read a void column.
    let last: StatementResult = { rows: [], count: 0 };
    await transactions.transaction(async (tx) => {
      for (const [index, one] of texts.entries()) {
        const answer = index === texts.length - 1 ? returns(one) : 'count';
        last = await transactions.query(tx, { text: one, values: values[index] ?? [], returns: answer });
      }
    });
    return { rows: last.rows, rowCount: last.count };
  };
  return {
    inTransaction,
    async query(text, values = []) {
      const statements = values.length === 0 ? splitStatements(text) : [text];
      if (statements.length > 1) return inTransaction(statements, []);
      const { rows, count } = await execute({ text, values, returns: returns(text) });
      return { rows, rowCount: count };
    },
  };
}

/**
 * The pool over an ORM alone: `query` as a pool's, and `inTransaction`, which runs statements (`texts`, each
 * with its `values`) one by one in one transaction of the ORM and resolves the last one's result.
 */
interface OrmPool extends PgQueryable {
  inTransaction(texts: string[], values: unknown[][]): Promise<PgQueryResult>;
}

/**
 * The insert's result of a simple query `LOCK ...; <insert>` (see `#insert`): pg answers one result per
 * statement; a driver that gives only one gives the last. One without a count (the lock's, from a driver
 * that gives the first) is refused: read as nothing inserted, every receive would be a duplicate, answered
 * 200 and lost.
 */
function lastResult(answered: unknown, table: string): PgQueryResult {
  const last: unknown = Array.isArray(answered) ? answered.at(-1) : answered;
  const rows: unknown = Reflect.get(Object(last), 'rows');
  const rowCount: unknown = Reflect.get(Object(last), 'rowCount');
  if (!Array.isArray(rows) || typeof rowCount !== 'number') {
    throw new StoreError(`PostgresStore: a receive on ${table} was answered without the insert's result`);
  }
  return { rows, rowCount };
}

/**
 * `Landed`'s words after a raw `ROLLBACK` (`ROLLED_BACK` of orm-transaction.ts), as PostgreSQL ends a
 * transaction: a `COMMIT` of one that a failed statement aborted rolls it back, so the listener may have
 * sent no `ROLLBACK` at all.
 */
const ROLLED_BACK_POSTGRES =
  'a raw ROLLBACK, then resolved (or a COMMIT after a statement that failed, which PostgreSQL makes a ' +
  'ROLLBACK): anything it wrote after it outside a transaction committed on its own';

/**
 * What the mark in an ORM's transaction came to (see `deliveredInOrm`): delivered, or the lease lost (the
 * entry is there, held by another attempt). Throws when that transaction does not see the entry at all: the
 * ORM is on another database or schema than the store's pool, and would otherwise drop every attempt as a
 * lost lease, without a word, for ever.
 */
function markedInOrm(result: StatementResult, key: string, orm: string): 'delivered' | 'lost' {
  const row = result.rows[0] ?? {};
  // The mark ran, so the session is outside the delivery's transaction: a listener sent a raw ROLLBACK, or a
  // COMMIT after a statement that failed (PostgreSQL ends no transaction on its own: a failed statement or a
  // deadlock leaves it aborted, and the mark would fail in it), then resolved. What it wrote after that
  // committed on its own: a retry would write it again (a listener that retries its credit after rolling
  // back), so the entry is dead.
  if (row.rolled_back === true || row.rolled_back === 't') throw new Landed(key, orm, ROLLED_BACK_POSTGRES);
  if (Number(row.marked) === 1) return 'delivered';
  if (row.seen === true || row.seen === 't' || row.seen === 1) return 'lost';
  throw new StoreError(
    `the transaction of ${orm} does not see the inbox entry ${key}: is ${orm} pointed at the same ` +
      "database and schema as the store's pool? (a search_path of its own, Prisma's ?schema= in its URL)",
  );
}

/** PostgreSQL's "insufficient_privilege" error code. */
const INSUFFICIENT_PRIVILEGE = '42501';

/**
 * A claim's failure, saying what the role needs when it was refused a privilege: PostgreSQL names only the
 * table, and a role that could claim before the claim took its lock (SELECT on the inbox) is refused the
 * `LOCK TABLE ... IN SHARE MODE`, which asks for more. `error` as it is for any other failure.
 */
function claimRefused(error: unknown, table: string): unknown {
  if (!(error instanceof StoreError)) return error;
  const cause: unknown = error.cause;
  if (Reflect.get(Object(cause), 'code') !== INSUFFICIENT_PRIVILEGE) return error;
  return new StoreError(
    `${error.message}: a claim first takes ${table} in SHARE mode (LOCK TABLE), which needs UPDATE, DELETE ` +
      `or TRUNCATE on it (SELECT and INSERT are not enough); then it writes ${claimsTable(table)}, which ` +
      'needs SELECT, INSERT and UPDATE',
    { cause },
  );
}

/** The `code` of a driver's error (PostgreSQL's SQLSTATE), if it has one. */
function codeOf(error: unknown): unknown {
  try {
    return Reflect.get(Object(error), 'code');
  } catch {
    return undefined; // a revoked Proxy: a failure like any other
  }
}

/** Whether a query failed because its table does not exist (PostgreSQL's `42P01`). */
function missing(error: unknown): boolean {
  return codeOf(error) === UNDEFINED_TABLE;
}
