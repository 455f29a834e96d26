/**
 * kyselyTransactions over a dialect that ends its transactions through a method of its connection, not
 * through `executeQuery('commit')`, and hands every user one connection object (as an embedded database's
 * dialect does: Kysely's own PGlite dialect commits through PGlite's transaction API). No database: the
 * connection answers every query with no rows.
 */
import {
  CompiledQuery,
  Kysely,
  PostgresAdapter,
  PostgresIntrospector,
  PostgresQueryCompiler,
  Transaction,
  type DatabaseConnection,
  type Dialect,
  type Driver,
  type QueryResult,
} from 'kysely';
import { kyselyTransactions } from '../../../../lib/orm.js';

/** One connection for every user; what it was sent, in order. */
class OneConnection implements DatabaseConnection {
  readonly sent: string[] = [];
  executeQuery<R>(query: CompiledQuery): Promise<QueryResult<R>> {
    this.sent.push(query.sql);
    return Promise.resolve({ rows: [] });
  }
  // eslint-disable-next-line require-yield
  async *streamQuery<R>(): AsyncIterableIterator<QueryResult<R>> {
    await Promise.resolve();
    throw new TypeError('no streams here');
  }
  /** How the driver ends a transaction: not through `executeQuery`. */
  end(how: 'commit' | 'rollback'): Promise<void> {
    this.sent.push(`(${how})`);
    return Promise.resolve();
  }
}

const oneConnectionDialect = (connection: OneConnection): Dialect => {
  const driver: Driver = {
    init: () => Promise.resolve(),
    acquireConnection: () => Promise.resolve(connection),
    beginTransaction: async () => {
      await connection.executeQuery(CompiledQuery.raw('begin'));
    },
    commitTransaction: () => connection.end('commit'),
    rollbackTransaction: () => connection.end('rollback'),
    releaseConnection: () => Promise.resolve(),
    destroy: () => Promise.resolve(),
  };
  return {
    createAdapter: () => new PostgresAdapter(),
    createDriver: () => driver,
    createIntrospector: (db) => new PostgresIntrospector(db),
    createQueryCompiler: () => new PostgresQueryCompiler(),
  };
};

describe('kyselyTransactions over a dialect that commits through its connection', () => {
  // The connection's guard (kysely.ts) was put back only when Kysely's COMMIT or ROLLBACK ran through
  // executeQuery. Here it never does: each delivery left its guard on the connection, the next one wrapped
  // it again, and every query walked the chain, one more per delivery: after about 10,000 deliveries each
  // one, and the partner's own queries, threw "Maximum call stack size exceeded" (the process crashed when
  // it came from a promise's rejection).
  test('after 20,000 deliveries, a delivery and the partner own queries still run', async () => {
    const connection = new OneConnection();
    const db = new Kysely<Record<string, never>>({ dialect: oneConnectionDialect(connection) });
    const transactions = kyselyTransactions(db);
    const select = CompiledQuery.raw('select 1');
    for (let delivery = 0; delivery < 20_000; delivery += 1) {
      await transactions
        .transaction(async (tx) => {
          await tx.executeQuery(select);
          if (delivery % 7 === 3) throw new TypeError('a listener failed');
        })
        .catch((error: unknown) => {
          if (!(error instanceof TypeError)) throw error;
        });
    }
    await transactions.transaction((tx) => tx.executeQuery(select));
    await expect(db.executeQuery(select)).resolves.toEqual({ rows: [] });
    expect(connection.sent.slice(-4)).toEqual(['begin', 'select 1', '(commit)', 'select 1']);
  });
});

describe('kyselyTransactions: tx refuses a transaction of its own', () => {
  // Kysely 0.28's Transaction has its instance's startTransaction(): a BEGIN and a COMMIT of its own on the
  // delivery's connection, the COMMIT committing the listener's writes without the delivered mark. Each of
  // withPlugin, withoutPlugins, withSchema and withTables makes a new Transaction object: refused there too.
  test('tx.startTransaction() and tx.connection(), and those of every Transaction made of tx, throw a TypeError at once', async () => {
    const connection = new OneConnection();
    const db = new Kysely<Record<string, never>>({ dialect: oneConnectionDialect(connection) });
    const refusals: unknown[] = [];
    await kyselyTransactions(db).transaction(async (tx) => {
      const made = [
        tx,
        tx.withoutPlugins(),
        tx.withPlugin({
          transformQuery: ({ node }) => node,
          transformResult: ({ result }) => Promise.resolve(result),
        }),
        tx.withSchema('other'),
        tx.withTables<{ other: { id: string } }>(),
        tx.withSchema('other').withoutPlugins().withTables(),
      ];
      for (const instance of made) {
        for (const take of [() => instance.startTransaction(), () => instance.connection()]) {
          try {
            take(); // begun, it would hold the delivery's connection until its commit()
          } catch (error) {
            refusals.push(error);
          }
        }
      }
      await tx.withoutPlugins().executeQuery(CompiledQuery.raw('select 1'));
    });
    expect(refusals).toHaveLength(12);
    for (const refusal of refusals) {
      expect(refusal).toBeInstanceOf(TypeError);
      expect(refusal).toEqual(
        expect.objectContaining({
          message: expect.stringMatching(
            /^kyselyTransactions: a listener cannot .*\(tx\.(startTransaction|connection)\(\)\).*Write through tx itself/s,
          ),
        }),
      );
    }
    expect(connection.sent).toEqual(['begin', 'select 1', '(commit)']);
  });
});

describe('kyselyTransactions over Kysely 0.29, whose Transaction has $extendTables, $omitTables, $pickTables', () => {
  // Kysely 0.29 (in ipn-kit's peer range) adds three methods that each make a new Transaction of the same
  // transaction; here as 0.29 writes them (`new Transaction({ ...this.#props })`, what withTables does) on
  // 0.28's class. A Transaction made by one carried none of ipn-kit's refusals: on 0.28's class its
  // startTransaction() began a controlled transaction on the delivery's connection; on 0.29 Kysely refuses
  // it, without saying why or what to do.
  const added = ['$extendTables', '$omitTables', '$pickTables'];
  beforeAll(() => {
    for (const name of added) {
      Reflect.defineProperty(Transaction.prototype, name, {
        value(this: Transaction<Record<string, never>>) {
          return Reflect.apply(Transaction.prototype.withTables, this, []) as unknown;
        },
        configurable: true,
        writable: true,
      });
    }
  });
  afterAll(() => {
    for (const name of added) Reflect.deleteProperty(Transaction.prototype, name);
  });

  test('a Transaction made of tx by each of them (and of what it makes) refuses startTransaction() and connection()', async () => {
    const connection = new OneConnection();
    const db = new Kysely<Record<string, never>>({ dialect: oneConnectionDialect(connection) });
    const refusals: unknown[] = [];
    await kyselyTransactions(db).transaction(async (tx) => {
      const made = added.flatMap((name) => {
        const instance = Reflect.apply(Reflect.get(tx, name) as () => unknown, tx, []) as typeof tx;
        return [instance, instance.withoutPlugins()];
      });
      for (const instance of made) {
        for (const take of [() => instance.startTransaction(), () => instance.connection()]) {
          try {
            take();
          } catch (error) {
            refusals.push(error);
          }
        }
      }
      await made[0]!.executeQuery(CompiledQuery.raw('select 1')); // in the delivery's transaction
    });
    expect(refusals).toHaveLength(12);
    for (const refusal of refusals) {
      expect(refusal).toBeInstanceOf(TypeError);
      expect(refusal).toEqual(
        expect.objectContaining({
          message: expect.stringMatching(/^kyselyTransactions: a listener cannot .*Write through tx itself/s),
        }),
      );
    }
    expect(connection.sent).toEqual(['begin', 'select 1', '(commit)']);
  });
});
