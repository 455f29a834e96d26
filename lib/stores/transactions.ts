/**
 * One SQL statement a store runs, in its database's own placeholder style (`$1` for PostgreSQL, `?` for
 * MySQL and SQLite). `returns` says what the store reads of it: the rows it returned (a `SELECT`, or a write
 * with `RETURNING`), or how many rows it changed (`count`).
 * @inline
 */
export interface Statement {
  text: string;
  values: unknown[];
  returns: 'rows' | 'count';
}

/**
 * What a statement came to: `rows` it returned (empty for a `count` statement when the ORM gives none), and
 * `count`, the rows it changed (for a `rows` statement: how many it returned).
 * @inline
 */
export interface StatementResult {
  rows: Array<Record<string, unknown>>;
  count: number;
}

/**
 * How a store runs each delivery attempt inside a transaction that your ORM opens, so that what a listener
 * writes through the ORM's own transaction object (its context's `tx`) commits together with the
 * `delivered` mark, or not at all. `ipn-kit/orm` makes one for Prisma, Drizzle, Kysely, Knex, TypeORM and
 * Sequelize; for another ORM, write these few lines yourself, keeping its contract:
 *
 * - `transaction(work)` runs `work` once, and settles only once `work` has and the transaction has ended.
 * - Once `transaction()` has settled, a query through its `tx` fails: it never runs outside a transaction
 *   (an abandoned attempt's listener may still be running, and its late write must not land). ipn-kit
 *   refuses every use of the `tx` it hands listeners once their attempt has ended, whatever the ORM, with
 *   one `DeliveryError`; what it cannot see is a query builder or statement a listener took from `tx`
 *   before the end and runs after it, which the ORM (or its connection) must refuse. `runStoreConformance`'s
 *   `late-write` rule, given `lateWrite`, checks a store over your `Transactions`.
 * - While the transaction is open, an `error` its connection emits (the server ended it) must not crash the
 *   process.
 *
 * @typeParam Tx the ORM's transaction object, as the ORM types it: what listeners get as `tx`.
 */
export interface Transactions<Tx = unknown> {
  /** The ORM's name, for messages: `'Prisma'`, `'Drizzle'`, ... */
  readonly name: string;
  /**
   * Runs `work` in a new transaction of the ORM: commits when `work` resolves, rolls back when it rejects
   * (and rejects with its error), as the ORM's own transaction helper does.
   */
  transaction<T>(work: (tx: Tx) => Promise<T>): Promise<T>;
  /** Runs one statement inside `tx`. */
  query(tx: Tx, statement: Statement): Promise<StatementResult>;
  /**
   * Optional: runs one statement on its own, outside any transaction. With it, a store may be given the ORM
   * alone (no pool of its own): it runs its own statements through this.
   */
  execute?(statement: Statement): Promise<StatementResult>;
}

/** Whether `value` looks like a {@link Transactions}: for a clear error at construction. */
export function isTransactions(value: unknown): value is Transactions {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof Reflect.get(value, 'transaction') === 'function' &&
    typeof Reflect.get(value, 'query') === 'function'
  );
}
