import { checkReplayWith, notMigrated, replayEveryDead, statusCounts } from './store-core.js';
import type { StoreError } from '../shared/errors.js';
import { checkListOptions } from './list-options.js';
import { checkPurge, redactEach } from './redact-record.js';
import type { MigrateOptions, MigrationReport } from './schema-migrations.js';
import type {
  DeliveryStatus,
  InboxEntry,
  ListOptions,
  PurgedStatus,
  StatusCounts,
  StorePurgeOptions,
} from './store.js';

/** Which of a SQL store's tables a statement is about, for the message of a missing one. */
export type TableOf = 'inbox' | 'expectations' | 'audit' | 'control' | 'claims';

/**
 * The `StoreError` of a statement that found the table `of` missing (`notMigrated`): `sql` names, for each
 * table, the SQL that makes it; `database` the database (`PostgreSQL`).
 */
export function missingTable(
  owner: string,
  table: string,
  of: TableOf,
  sql: Record<TableOf, string>,
  database: string,
  error: unknown,
): StoreError {
  const named: Record<TableOf, string> = {
    inbox: table,
    audit: `${table}_audit (the operators' audit trail)`,
    control: `${table}_control (ipn.pause() for every instance)`,
    expectations: `${table}_expected (of ipn.expect())`,
    claims: `${table}_claims (the at-most-once claims)`,
  };
  return notMigrated(owner, named[of], sql[of], database, error);
}

/** `list()`'s options, checked (`checkListOptions`). */
export type CheckedListOptions = ReturnType<typeof checkListOptions>;

/**
 * What one SQL store's dialect gives the shared flow of {@link SqlStore}: its statements, how one runs,
 * and the values each takes (times as the dialect keeps them: a `Date`, or milliseconds).
 */
export interface SqlDialect {
  /** The store's class, in every message (`PostgresStore`). */
  readonly owner: string;
  /** The statements the shared flow runs (see each dialect's `*-sql.ts`). */
  readonly sql: {
    get: string;
    countByStatus: string;
    replay: string;
    /** `replay` from some statuses with the record replaced, only while no live lease holds the entry. */
    replayWith: string;
    release: string;
    /** Deletes the claim of a key (`claim()`'s row in `<table>_claims`). */
    releaseClaim: string;
    purge: string;
    /** Deletes the claims made before a time that no longer hold their key: `purge()`'s rule for claims. */
    purgeClaims: string;
    /** Deletes the claims made before a time, those still holding their key too: `insideDedupeWindow`. */
    purgeLiveClaims: string;
    purgeDead: string;
    /** PostgreSQL: `redact()` as one statement. */
    redact?: string;
    /** Otherwise: the rows `redact()` may blank (`key`, `record`), and the statement that sets one. */
    redactable?: string;
    setRecord?: string;
  };
  /** Runs a statement that reads rows; a failure is a `StoreError`. */
  read(text: string, values: unknown[]): Promise<unknown[]>;
  /** Runs a statement that changes rows; resolves how many. A failure is a `StoreError`. */
  change(text: string, values: unknown[]): Promise<number>;
  /** @throws TypeError for a key the dialect cannot keep exactly. */
  checkKey(key: string): unknown;
  /** A row as an `InboxEntry`. */
  toEntry(row: unknown): InboxEntry;
  /** `purge()`'s and `redact()`'s `before` as a statement's value. */
  time(date: Date): unknown;
  /** The values of `release()`'s statement. */
  release(key: string, leaseId: string | null): unknown[];
  /** `list()`'s statement and values. */
  list(options: CheckedListOptions): [string, unknown[]];
  /** The values of `countByStatus()`'s statement. */
  countByStatus(receivedFrom: Date | undefined): unknown[];
  /** The values of `replay()`'s statement. */
  replay(key: string, delayMs: number, statuses: readonly DeliveryStatus[] | undefined): unknown[];
  /** The values of `replayWith()`'s statement: `statuses` joined by commas (PostgreSQL: an array). */
  replayWith(key: string, record: Record<string, unknown>, statuses: readonly DeliveryStatus[]): unknown[];
  /** A blanked record as it is stored (with `redactable`). */
  stored?(record: Record<string, unknown>): string;
}

/**
 * The flow every SQL store (PostgreSQL, MySQL, SQLite) shares, written once: the argument checks, the
 * statements' order and results. Each store gives its dialect (`dialect`) and keeps what differs: its
 * options, claims, receives, leases, settlements and delivery transactions.
 */
export abstract class SqlStore {
  /** This store keeps each notification and its delivery state: the router may deliver at least once. */
  readonly durable = true as const;
  /** @internal The store's dialect: statements, values, how one runs. */
  protected abstract readonly dialect: SqlDialect;

  /**
   * Brings the store's tables to the latest schema version (see `migrateSchema`). Idempotent, and safe to
   * run on every start, from several processes at once: they take turns.
   * @throws StoreError when a statement fails, or the database is at a newer version than this ipn-kit's
   * (nothing is changed: ipn-kit never downgrades).
   */
  async migrate(): Promise<void> {
    await this.migrateSchema();
  }

  /**
   * `migrate()`, saying what it did: the version before and after, and the versions run. `{ dryRun: true }`
   * runs nothing and says what would run (`ipn-kit migrate --dry-run`).
   * @throws StoreError as `migrate()`.
   */
  abstract migrateSchema(options?: MigrateOptions): Promise<MigrationReport>;

  /**
   * Deletes the claim and the inbox entry of `key`, so that the next claim or receive of it succeeds; given
   * `leaseId`, only the entry, and only while that lease holds it.
   */
  async release(key: string, leaseId?: string): Promise<void> {
    this.dialect.checkKey(key);
    const entry = () =>
      this.dialect.change(this.dialect.sql.release, this.dialect.release(key, leaseId ?? null));
    if (leaseId !== undefined) {
      await entry();
      return;
    }
    // The claim last: while it holds the key, no receive stores an entry (an instance at least once), which
    // a delete after it would take from under that instance's lease (except on MySQL under READ COMMITTED,
    // where a receive in progress may not see the claim: docs/stores-and-delivery.md). Deleted even when the
    // entry's failed.
    try {
      await entry();
    } finally {
      await this.dialect.change(this.dialect.sql.releaseClaim, [key]);
    }
  }

  /** Entries matching every filter, oldest (or newest) first. @throws TypeError for a bad status, order, limit, offset. */
  async list(options: ListOptions = {}): Promise<InboxEntry[]> {
    const [text, values] = this.dialect.list(checkListOptions(this.dialect.owner, options));
    return (await this.dialect.read(text, values)).map((row) => this.dialect.toEntry(row));
  }

  /** How many notifications the inbox holds by status (received at or after `receivedFrom`, when given). */
  async countByStatus(receivedFrom?: Date): Promise<StatusCounts> {
    const values = this.dialect.countByStatus(receivedFrom);
    return statusCounts(await this.dialect.read(this.dialect.sql.countByStatus, values));
  }

  /** The entry of `key`, or `undefined`. */
  async get(key: string): Promise<InboxEntry | undefined> {
    const rows = await this.dialect.read(this.dialect.sql.get, [key]);
    return rows.length > 0 ? this.dialect.toEntry(rows[0]) : undefined;
  }

  /**
   * Makes `key` due now whatever its status (only from one of `from`, when given): `received`, attempts 0,
   * `last_error` kept; a live lease is kept (the attempt holding it finishes first). `false` for a key only
   * `claim()` took, which holds no notification (its claim is in `<table>_claims`, not in the inbox).
   */
  async replay(key: string, delayMs = 0, from?: readonly DeliveryStatus[]): Promise<boolean> {
    const values = this.dialect.replay(key, delayMs, from);
    return (await this.dialect.change(this.dialect.sql.replay, values)) === 1;
  }

  /**
   * `replay(key, 0, from)` with `record` (the service's own) in place of the entry's, in one statement: only
   * while its status is one of `from` and no live lease holds it (see `DurableStore.replayWith`).
   */
  async replayWith(
    key: string,
    record: Record<string, unknown>,
    from: readonly DeliveryStatus[],
  ): Promise<boolean> {
    this.dialect.checkKey(key);
    checkReplayWith(this.dialect.owner, record, from);
    const values = this.dialect.replayWith(key, record, from);
    return (await this.dialect.change(this.dialect.sql.replayWith, values)) === 1;
  }

  /** `replay()` for every `dead` entry; resolves how many. */
  replayDead(): Promise<number> {
    return replayEveryDead(this);
  }

  /**
   * Deletes `delivered` rows delivered before `before`, and the claims (`<table>_claims`) made before it that
   * no longer hold their key (all of them given `options.insideDedupeWindow`); given `'dead'`, the dead rows
   * last updated before it. Resolves how many (claims included).
   */
  async purge(
    before: Date,
    status: PurgedStatus = 'delivered',
    options?: StorePurgeOptions,
  ): Promise<number> {
    checkPurge(this.dialect.owner, before, status);
    const { sql } = this.dialect;
    const values = [this.dialect.time(before)];
    if (status === 'dead') return this.dialect.change(sql.purgeDead, values);
    // A claim's expires_at, not `before`, says how long it holds its key: one made under a longer ttlMs than
    // the caller's still does, and deleting it in the same statement that checks it leaves no gap for one
    // committed after a check to go.
    const live = options?.insideDedupeWindow === true;
    const claims = await this.dialect.change(live ? sql.purgeLiveClaims : sql.purgeClaims, values);
    return claims + (await this.dialect.change(sql.purge, values));
  }

  /** Blanks the customer's name and number in delivered and dead rows received before `before`; how many. */
  async redact(before: Date): Promise<number> {
    const { owner, sql } = this.dialect;
    checkPurge(owner, before, 'delivered', 'redact');
    if (sql.redact !== undefined) return this.dialect.change(sql.redact, [this.dialect.time(before)]);
    const rows = (await this.dialect.read(sql.redactable!, [this.dialect.time(before)])) as Array<
      Record<string, unknown>
    >;
    const candidates = rows.map((row) => ({ key: String(row.key), stored: String(row.record) }));
    return redactEach(
      candidates,
      (record) => this.dialect.stored!(record),
      async (key, stored, blanked) =>
        (await this.dialect.change(sql.setRecord!, [blanked, key, stored])) === 1,
    );
  }
}
