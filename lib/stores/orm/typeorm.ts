import { StoreError } from '../../shared/errors.js';
import type { Statement, StatementResult, Transactions } from '../transactions.js';
import { describeArgument } from './argument.js';
import { LateQueryError } from './late-query.js';

/**
 * The part of a TypeORM `DataSource` that the adapter calls; `manager` gives the type of the `EntityManager`
 * its transactions hand out, so ipn-kit names no type of TypeORM.
 * @inline
 */
export interface DataSourceLike {
  /** `dataSource.transaction(callback)`: opens each delivery attempt's transaction. */
  transaction: (...args: never[]) => unknown;
  /** `dataSource.createQueryRunner()`: runs a statement of the store outside any transaction. */
  createQueryRunner: (...args: never[]) => unknown;
  /** The DataSource's EntityManager: its type is the type of the transactions' `tx`. */
  readonly manager: object;
}

/**
 * A query runner's `query` with `useStructuredResult` (TypeORM 0.3 and later): the rows and, from
 * `rowCount`, the rows a statement changed, whatever its command (plain `query` gives `[rows, count]` for an
 * UPDATE or DELETE only, and the rows alone for an INSERT).
 */
interface QueryRunner {
  query(
    text: string,
    values: unknown[],
    useStructuredResult: true,
  ): Promise<{ records?: Array<Record<string, unknown>>; affected?: number | null }>;
  release(): Promise<void>;
}
interface DataSource<Tx> {
  transaction<T>(work: (manager: Tx) => Promise<T>): Promise<T>;
  createQueryRunner(): QueryRunner;
}

/** The part of the transaction's query runner that a listener could end the transaction with. */
interface TransactionRunner {
  transactionDepth?: number;
  commitTransaction(): Promise<void>;
  rollbackTransaction(): Promise<void>;
}

/**
 * Makes `runner`'s `commitTransaction()` and `rollbackTransaction()` throw while they would end the
 * delivery's transaction itself (depth 1), until the returned function puts them back. A listener reaches
 * the runner through its `tx` (`tx.queryRunner`): one that rolled the transaction back and resolved would
 * have the `delivered` mark commit on its own, without the writes it undid; one that committed and threw
 * would have its writes committed for an attempt that is retried. Inside a `tx.transaction(...)` of theirs
 * (depth 2 or more) both still work: TypeORM makes them a savepoint's release and rollback. Set on the
 * runner itself, as own properties over its class's methods, so that every way to it (the manager of a
 * nested transaction, `tx.queryRunner.manager`) is covered; the runner is the attempt's alone.
 */
function refuseEnd(runner: TransactionRunner): () => void {
  const guarded = (method: 'commitTransaction' | 'rollbackTransaction') => {
    const own = runner[method].bind(runner);
    return (): Promise<void> => {
      if ((runner.transactionDepth ?? 1) > 1) return own();
      return Promise.reject(
        new TypeError(
          `TypeORM: a listener cannot ${method === 'commitTransaction' ? 'commit' : 'roll back'} the delivery's ` +
            `transaction (tx.queryRunner.${method}()): ipn-kit commits it together with the delivered mark ` +
            'once every listener has resolved. To roll it back, throw from the listener; to undo part of ' +
            'it, use a nested transaction (tx.transaction(...), a savepoint).',
        ),
      );
    };
  };
  Object.assign(runner, {
    commitTransaction: guarded('commitTransaction'),
    rollbackTransaction: guarded('rollbackTransaction'),
  });
  return () => {
    Reflect.deleteProperty(runner, 'commitTransaction');
    Reflect.deleteProperty(runner, 'rollbackTransaction');
  };
}

/**
 * Puts, as `manager.queryRunner`, the transaction's query runner with a `release()` that throws: what a
 * listener reaches the runner by reads it there (`tx.queryRunner`, `tx.release()`, a nested transaction's
 * manager, which is the same one, and its repositories and query builders; an entity subscriber's
 * `event.queryRunner` is the runner itself). A released runner hands its connection back to the pool in the
 * middle of the transaction: the credit stays there, uncommitted, and the next user of that connection
 * commits it with its own work (the retry's transaction: a second credit). Not set on the runner itself, as
 * `refuseEnd` does: `dataSource.destroy()` releases every connected runner, this one too (the driver lists
 * the runners themselves), and must still do so while a listener hangs; the pool then closes that
 * connection, which rolls the attempt back. Every other member is the runner's own, run on the runner
 * itself, so TypeORM's code behind it sees its own object. Never taken back: the manager and the runner are
 * this attempt's alone, and TypeORM releases the runner through its own reference to it.
 *
 * Once `ended()`, every member of it throws when read, and every method handed out before when called: a
 * query builder a listener took from `tx` in time (`tx.createQueryBuilder()`, a repository) reads the runner
 * from the manager when it runs, and one run once its attempt was abandoned went to the transaction's
 * connection, behind the ROLLBACK TypeORM queued there after the listener's own query, and committed on its
 * own. Members too, not only methods: an insert's builder reads the runner's `broadcaster` before its query,
 * and an entity subscriber it runs gets the runner itself (`event.queryRunner`), whose write landed after
 * the ROLLBACK while the insert was refused. TypeORM's own COMMIT or ROLLBACK (and ipn-kit's mark, inside
 * the work) go through the runner itself.
 */
function guardRunner(manager: object, runner: object, ended: () => boolean): void {
  /** Each method as handed out, the same one each time it is read. */
  const methods = new Map<unknown, unknown>();
  const release = (): Promise<void> =>
    Promise.reject(
      new TypeError(
        "TypeORM: a listener cannot release the delivery's query runner (tx.queryRunner.release(), " +
          'tx.release()): its connection would go back to the pool inside the transaction, with your writes ' +
          'uncommitted there. ipn-kit ends the transaction, with the delivered mark, and TypeORM then ' +
          'releases the runner.',
      ),
    );
  const guarded = new Proxy(runner, {
    get(target, property) {
      // `then` is read by promise resolution: an ended runner is not a thenable, not a refusal.
      if (ended() && typeof property === 'string' && property !== 'then') {
        throw new LateQueryError('typeormTransactions');
      }
      if (property === 'release') return release;
      const value: unknown = Reflect.get(target, property, target);
      if (typeof value !== 'function' || property === 'constructor') return value;
      let method = methods.get(value);
      if (method === undefined) {
        const own = (value as (...args: unknown[]) => unknown).bind(target);
        method = (...args: unknown[]): unknown => {
          if (ended()) throw new LateQueryError('typeormTransactions');
          return own(...args);
        };
        methods.set(value, method);
      }
      return method;
    },
  });
  Reflect.set(manager, 'queryRunner', guarded);
}

/**
 * Tells whether TypeORM is broadcasting `BeforeTransactionCommit`, `BeforeTransactionRollback` or
 * `AfterTransactionCommit` for `runner` (its `commitTransaction()` and `rollbackTransaction()` do, around
 * their COMMIT or ROLLBACK): the DataSource's subscribers run then, with the delivery's manager as
 * `event.manager`, whose `queryRunner` is the guard above. Before the end, what they send goes into the
 * transaction, ahead of its end, as it would have while the listeners ran; after a COMMIT, on its own, once
 * the attempt is delivered, which no retry writes again. Refused, a subscriber's write failed the commit of
 * every delivery, and one refused before the ROLLBACK had TypeORM release the runner with its transaction
 * still open (it swallows the error), the failed attempt's credit in it, for the next user of that
 * connection (the retry) to commit. Not after a ROLLBACK: a write then lands on its own, and the retry
 * writes it again. Set on the runner's own broadcaster, which is this attempt's alone.
 */
function subscribersRunning(runner: object): () => boolean {
  const broadcaster: unknown = Reflect.get(runner, 'broadcaster');
  const broadcast: unknown =
    typeof broadcaster === 'object' && broadcaster !== null
      ? Reflect.get(broadcaster, 'broadcast')
      : undefined;
  if (typeof broadcast !== 'function') return () => false;
  const events = new Set(['BeforeTransactionCommit', 'BeforeTransactionRollback', 'AfterTransactionCommit']);
  let broadcasting = 0;
  const own = (args: unknown[]) => Reflect.apply(broadcast, broadcaster, args) as Promise<unknown>;
  Reflect.set(Object(broadcaster), 'broadcast', async (...args: unknown[]) => {
    if (!events.has(String(args[0]))) return own(args);
    broadcasting += 1;
    try {
      return await own(args);
    } finally {
      broadcasting -= 1;
    }
  });
  return () => broadcasting > 0;
}

async function run(runner: QueryRunner, statement: Statement): Promise<StatementResult> {
  const { records = [], affected } = await runner.query(statement.text, statement.values, true);
  return { rows: records, count: statement.returns === 'rows' ? records.length : (affected ?? 0) };
}

/**
 * Runs each delivery attempt in a TypeORM transaction (`dataSource.transaction(callback)`): listeners get
 * its `EntityManager` as `tx`, and what they write through it (`tx.save(...)`, `tx.getRepository(...)`,
 * `tx.query(...)`) commits together with ipn-kit's `delivered` mark, or not at all. A `tx.transaction(...)`
 * of theirs is a savepoint, as TypeORM makes it; `tx.queryRunner.commitTransaction()` and
 * `rollbackTransaction()` throw outside one (ipn-kit ends the transaction, with the mark: a listener rolls it
 * back by throwing), and `tx.queryRunner.release()` throws. The store's statements run through the
 * transaction's query runner; with `execute`, through a query runner of their own, so the store may run
 * through TypeORM alone. TypeORM 0.3 and later.
 *
 * @param dataSource your TypeORM `DataSource` (initialized before the first delivery).
 * @throws TypeError when `dataSource` is not a DataSource.
 * @example
 * import { DataSource } from 'typeorm';
 * import { PostgresStore } from 'ipn-kit/postgres';
 * import { typeormTransactions } from 'ipn-kit/orm';
 *
 * const dataSource = new DataSource({ type: 'postgres', url: process.env.DATABASE_URL, entities: [Ledger] });
 * await dataSource.initialize();
 * const store = new PostgresStore({ pool, transactions: typeormTransactions(dataSource) });
 * const ipn = ipnRouter({ store, delivery: 'at-least-once' });
 * ipn.on('successful', async (n, { tx }) => {
 *   await tx.save(Ledger, { transactionId: n.transaction_id, amount: n.amount });
 * });
 */
export function typeormTransactions<D extends DataSourceLike>(dataSource: D): Transactions<D['manager']> {
  if (
    typeof dataSource !== 'object' ||
    dataSource === null ||
    typeof Reflect.get(dataSource, 'transaction') !== 'function' ||
    typeof Reflect.get(dataSource, 'createQueryRunner') !== 'function'
  ) {
    throw new TypeError(
      `typeormTransactions: expected a TypeORM DataSource (new DataSource({ type: 'postgres', ... })), got ${describeArgument(dataSource)}`,
    );
  }
  type Tx = D['manager'];
  const source = dataSource as unknown as DataSource<Tx>;
  // TypeORM's own words for it are "Driver not Connected".
  const initialized = (): void => {
    if (Reflect.get(dataSource, 'isInitialized') === false) {
      throw new StoreError(
        'typeormTransactions: the DataSource is not initialized: await dataSource.initialize() first',
      );
    }
  };
  return {
    name: 'TypeORM',
    transaction: async (work) => {
      initialized();
      return source.transaction(async (manager) => {
        const runner = Reflect.get(manager, 'queryRunner') as TransactionRunner | undefined;
        const restore = runner === undefined ? () => {} : refuseEnd(runner);
        let settled = false;
        if (runner !== undefined) {
          const subscribersRun = subscribersRunning(runner);
          guardRunner(manager, runner, () => settled && !subscribersRun());
        }
        try {
          return await work(manager);
        } finally {
          settled = true;
          restore(); // TypeORM's own commit or rollback follows
        }
      });
    },
    query: (tx, statement) => {
      // The EntityManager of a transaction always has its query runner: the transaction's connection.
      const runner = Reflect.get(tx, 'queryRunner') as QueryRunner | undefined;
      if (runner === undefined) {
        throw new TypeError(
          'typeormTransactions: the EntityManager has no query runner: it is not a transaction',
        );
      }
      return run(runner, statement);
    },
    execute: async (statement) => {
      initialized();
      const runner = source.createQueryRunner();
      try {
        return await run(runner, statement);
      } finally {
        await runner.release();
      }
    },
  };
}
