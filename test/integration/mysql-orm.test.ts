import knex, { type Knex } from 'knex';
import { createPool, type Pool, type RowDataPacket } from 'mysql2/promise';
import { DataTypes, Sequelize, type Transaction } from 'sequelize';
import { ipnRouter, type IpnNotification } from 'ipn-kit';
import { MysqlStore } from 'ipn-kit/mysql';
import { knexTransactions, sequelizeTransactions, type Transactions } from 'ipn-kit/orm';
import { knexLedgerRouter } from '../../examples/snippets/orm/knex-mysql.js';
import { sequelizeLedgerRouter } from '../../examples/snippets/orm/sequelize-mysql.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import {
  NOT_THE_PAYMENT,
  orderOf,
  orderPayment,
  refusedPayments,
  type OrderRow,
} from '../helpers/refused-payments.js';
import { recordEvents } from '../helpers/record-events.js';
import { servedRouters } from '../helpers/servers.js';
import { waitsForRowLock } from '../helpers/mysql-lock-wait.js';
import { describeWithService, eventually, mysqlUrl } from '../helpers/services.js';
import { runStoreConformance } from 'ipn-kit/testing';

jest.setTimeout(30_000);

/** An ORM opened on MySQL: its transactions, and a partner's credit of the ledger through its own API. */
interface MysqlOrm<Tx> {
  transactions: Transactions<Tx>;
  credit(tx: Tx, n: IpnNotification): Promise<void>;
  /** A raw statement sent through the ORM's transaction object, as a listener could send it. */
  raw(tx: Tx, statement: string): Promise<unknown>;
  close(): Promise<void>;
}

/** Each ORM as a partner sets it up on MySQL, crediting the table `ledger`. */
const ORMS: Array<[string, (ledger: string) => MysqlOrm<any>]> = [
  [
    'Knex',
    (ledger): MysqlOrm<Knex.Transaction> => {
      const db = knex({ client: 'mysql2', connection: mysqlUrl(), pool: { min: 0, max: 4 } });
      return {
        transactions: knexTransactions(db),
        credit: async (tx, n) => {
          await tx(ledger).insert({ transaction_id: n.transaction_id, amount: n.amount });
        },
        raw: (tx, statement) => tx.raw(statement),
        close: () => db.destroy(),
      };
    },
  ],
  [
    'Sequelize',
    (ledger): MysqlOrm<Transaction> => {
      const sequelize = new Sequelize(mysqlUrl(), { dialect: 'mysql', logging: false, pool: { max: 4 } });
      const Ledger = sequelize.define(
        'Ledger',
        {
          transactionId: { type: DataTypes.STRING, field: 'transaction_id', allowNull: false },
          amount: { type: DataTypes.DOUBLE },
        },
        { tableName: ledger, timestamps: false },
      );
      Ledger.removeAttribute('id'); // the ledger has no key
      return {
        transactions: sequelizeTransactions(sequelize),
        credit: async (tx, n) => {
          await Ledger.create({ transactionId: n.transaction_id, amount: n.amount }, { transaction: tx });
        },
        raw: (tx, statement) => sequelize.query(statement, { transaction: tx }),
        close: () => sequelize.close(),
      };
    },
  ],
];

describe.each(ORMS)('%s on MySQL', (name, openOrm) => {
  describeWithService('MariaDB', `exactly once through ${name} on MysqlStore`, () => {
    const suffix = `${name.toLowerCase()}_${process.pid}_${Date.now() % 100_000}`;
    const table = `ipn_myorm_${suffix}`;
    const ledger = `ledger_myorm_${suffix}`;
    let pool: Pool;
    let orm: MysqlOrm<unknown>;
    beforeAll(async () => {
      pool = createPool({ uri: mysqlUrl(), connectionLimit: 4 });
      await new MysqlStore({ pool, table }).migrate();
      // No unique key: a second credit of a payment is a second row.
      await pool.query(`CREATE TABLE ${ledger} (transaction_id VARCHAR(255) NOT NULL, amount DOUBLE)`);
      orm = openOrm(ledger);
    });
    afterAll(async () => {
      await orm?.close();
      await pool.query(`DROP TABLE IF EXISTS ${table}, ${table}_expected, ${ledger}`);
      await pool.end();
    });
    const serve = servedRouters();

    const router = (options: { leaseMs?: number } = {}) =>
      ipnRouter({
        store: new MysqlStore({ pool, table, transactions: orm.transactions }),
        delivery: 'at-least-once',
        logger: quiet,
        retryDelayMs: 20,
        recoveryIntervalMs: 50,
        ...options,
      });
    const keyOf = (payload: Record<string, unknown>) => `${String(payload.transaction_id)}:SUCCESSFUL`;
    const entryOf = async (key: string) => {
      const [rows] = await pool.query<RowDataPacket[]>(
        `SELECT status, attempts FROM ${table} WHERE \`key\` = ?`,
        [key],
      );
      return rows[0] as { status: string; attempts: number } | undefined;
    };
    const rowsOf = async (id: unknown): Promise<number> => {
      const [rows] = await pool.query<RowDataPacket[]>(
        `SELECT COUNT(*) AS n FROM ${ledger} WHERE transaction_id = ?`,
        [id],
      );
      return Number(rows[0]?.n);
    };
    const delivered = (key: string) =>
      eventually(`${key} delivered`, async () => (await entryOf(key))?.status === 'delivered');

    test('a notification posted twice credits the ledger once, through the ORM transaction', async () => {
      const { ipn, post } = await serve(router());
      const seen: unknown[] = [];
      ipn.on('successful', async (n, { tx, db }) => {
        seen.push(db);
        await orm.credit(tx, n);
      });
      const payload = uniquePayload();

      expect((await post(payload)).status).toBe(200);
      expect(await (await post(payload)).json()).toEqual({ ok: true, duplicate: true });
      await delivered(keyOf(payload));

      expect(await rowsOf(payload.transaction_id)).toBe(1);
      expect(seen).toEqual([undefined]); // no raw db beside the ORM's tx
    });

    test('a listener that credits, then throws on its first attempt: one row after the retry', async () => {
      const { ipn, post } = await serve(router());
      const recorder = recordEvents(ipn);
      ipn.on('successful', async (n, { tx, attempt }) => {
        await orm.credit(tx, n);
        if (attempt === 1) throw new Error('the order service is down');
      });
      const payload = uniquePayload();

      expect((await post(payload)).status).toBe(200);
      await delivered(keyOf(payload));

      expect(await rowsOf(payload.transaction_id)).toBe(1);
      expect(await entryOf(keyOf(payload))).toMatchObject({ attempts: 2 });
      expect(recorder.of('error').map((event) => event.error.message)).toEqual([
        expect.stringContaining('the order service is down'),
      ]);
    });

    test('a lease lost before the commit rolls the credit back; the holder of the lease credits once', async () => {
      const { ipn, post } = await serve(router({ leaseMs: 1_000 }));
      const attempts: number[] = [];
      ipn.on('successful', async (n, { tx, attempt, key }) => {
        attempts.push(attempt);
        await orm.credit(tx, n);
        if (attempt === 1) {
          // Another instance takes the entry meanwhile (its lease runs out after leaseMs, then it is retried).
          await pool.query(`UPDATE ${table} SET lease_id = 'another-instance' WHERE \`key\` = ?`, [key]);
        }
      });
      const payload = uniquePayload();

      expect((await post(payload)).status).toBe(200);
      await delivered(keyOf(payload));

      expect(attempts).toEqual([1, 2]);
      expect(await rowsOf(payload.transaction_id)).toBe(1); // the first attempt's credit was rolled back
    });

    test('a listener that runs past its time, then credits: that late credit is rolled back, never committed', async () => {
      const { ipn, post } = await serve(router({ leaseMs: 1_000 })); // abandoned after 900 ms
      const late: Array<Promise<void>> = [];
      ipn.on('successful', async (n, { tx, attempt }) => {
        if (attempt === 1) {
          const credit = new Promise<void>((resolve) => setTimeout(resolve, 1_200)).then(() =>
            orm.credit(tx, n),
          );
          late.push(credit.catch(() => {})); // refused by a transaction that ended, or rolled back with it
          await credit;
          return;
        }
        await orm.credit(tx, n);
      });
      const payload = uniquePayload();

      expect((await post(payload)).status).toBe(200);
      await delivered(keyOf(payload));
      await Promise.all(late);

      expect(await rowsOf(payload.transaction_id)).toBe(1);
      expect(await entryOf(keyOf(payload))).toMatchObject({ attempts: 2 });
    });

    test("a listener's write after its failed attempt ended (work it did not wait for) is never committed", async () => {
      // A query through the ORM's transaction object once that transaction has ended must be refused, not
      // run on a connection the ORM gave back to its pool (outside any transaction, committed at once).
      const { ipn, post } = await serve(router());
      const late: Array<Promise<unknown>> = [];
      ipn.on('successful', async (n, { tx, attempt }) => {
        if (attempt > 1) return orm.credit(tx, n);
        late.push(
          new Promise((resolve) => setTimeout(resolve, 100))
            .then(() => orm.credit(tx, n))
            .catch((error: unknown) => error),
        );
      });
      ipn.on('notification', (_n, { attempt }) => {
        if (attempt === 1) throw new Error('the order service is down');
      });
      const payload = uniquePayload();

      expect((await post(payload)).status).toBe(200);
      await delivered(keyOf(payload));
      await Promise.all(late);

      expect(await rowsOf(payload.transaction_id)).toBe(1);
    });

    test("the kit's late-write rule: a credit through tx once the attempt was abandoned, failed or delivered rejects, and lands nowhere", async () => {
      const tables: string[] = [];
      try {
        const result = await runStoreConformance(
          async () => {
            const conformance = `${table}_late_${tables.length}`;
            tables.push(conformance);
            const store = new MysqlStore({ pool, table: conformance, transactions: orm.transactions });
            await store.migrate();
            return store;
          },
          {
            only: ['late-write'],
            lateWrite: {
              write: (tx, id) =>
                orm.credit(tx, { transaction_id: id, amount: 1 } as unknown as IpnNotification),
              landed: async (id) => {
                const [rows] = await pool.query<RowDataPacket[]>(
                  `SELECT 1 FROM ${ledger} WHERE transaction_id = ?`,
                  [id],
                );
                return rows.length > 0;
              },
            },
          },
        );
        expect(result.failures).toEqual([]);
        expect(result.passed).toEqual(['late-write']);
      } finally {
        for (const conformance of tables)
          await pool.query(
            `DROP TABLE IF EXISTS ${conformance}, ${conformance}_expected, ${conformance}_states, ${conformance}_audit`,
          );
      }
    });

    // A raw ROLLBACK through tx, then the listener resolves: the mark finds the savepoint gone and a ROLLBACK
    // counted. Before, it was retried: right when the ROLLBACK undid the credit, a second credit when the
    // listener credited again after it (MySQL autocommits after a ROLLBACK, so that one landed). Nothing
    // tells the two apart: dead at once, for a person to check, with the credit there or not.
    test.each<[string, boolean, number]>([
      ['credits, sends a raw ROLLBACK', false, 0],
      ['credits, sends a raw ROLLBACK, credits again', true, 1],
    ])(
      'a listener that %s through tx, and resolves: dead at once, never credited twice',
      async (_what, again, credited) => {
        const { ipn, post } = await serve(router());
        const recorder = recordEvents(ipn);
        const payload = uniquePayload();
        const deadOf = () => recorder.of('dead').filter((event) => event.key === keyOf(payload));
        ipn.on('successful', async (n, { tx }) => {
          await orm.credit(tx, n);
          if (n.transaction_id !== payload.transaction_id) return;
          await orm.raw(tx, 'ROLLBACK');
          if (again) await orm.credit(tx, n);
        });

        expect((await post(payload)).status).toBe(200);
        await eventually('dead', () => deadOf().length > 0); // emitted once the entry is dead
        expect(await entryOf(keyOf(payload))).toMatchObject({ status: 'dead', attempts: 1 });
        expect(await rowsOf(payload.transaction_id)).toBe(credited);
        expect(deadOf().map((event) => event.lastError)).toEqual([
          expect.stringMatching(
            /^a listener ended the delivery transaction of .+ itself through tx \(a raw ROLLBACK, then resolved: anything it wrote after the ROLLBACK outside a transaction committed on its own, in \w+\)/,
          ),
        ]);
      },
    );

    // A raw COMMIT through tx commits the credit at once: marking it delivered is right (failing the attempt
    // would credit again on the retry).
    test('a listener that credits, sends a raw COMMIT through tx, and resolves: delivered once, one row', async () => {
      const { ipn, post } = await serve(router());
      const recorder = recordEvents(ipn);
      ipn.on('successful', async (n, { tx }) => {
        await orm.credit(tx, n);
        await orm.raw(tx, 'COMMIT');
      });
      const payload = uniquePayload();

      expect((await post(payload)).status).toBe(200);
      await delivered(keyOf(payload));

      expect(await rowsOf(payload.transaction_id)).toBe(1);
      expect(await entryOf(keyOf(payload))).toMatchObject({ attempts: 1 });
      expect(recorder.of('error')).toEqual([]);
    });

    // A raw COMMIT through tx, then a throw: the credit landed, and a retry would credit it again. The failed
    // attempt's rollback finds the savepoint gone and a COMMIT counted since the opening (then a ROLLBACK
    // too, or not): the entry is kept dead at once, for a person to check. Before, it was retried: 2 rows.
    test.each<[string, string[]]>([
      ['a raw COMMIT', ['COMMIT']],
      ['a raw COMMIT then a ROLLBACK', ['COMMIT', 'ROLLBACK']],
    ])(
      'a listener that credits, sends %s through tx, then throws: dead at once, one row',
      async (_what, statements) => {
        const { ipn, post } = await serve(router());
        const recorder = recordEvents(ipn);
        let attempts = 0;
        const payload = uniquePayload();
        // Of this payment only: an entry an earlier test left due is taken up by this router too.
        const deadOf = () => recorder.of('dead').filter((event) => event.key === keyOf(payload));
        ipn.on('successful', async (n, { tx }) => {
          if (n.transaction_id === payload.transaction_id) attempts += 1;
          await orm.credit(tx, n);
          for (const statement of statements) await orm.raw(tx, statement);
          throw new Error('the order service is down');
        });

        expect((await post(payload)).status).toBe(200);
        await eventually('dead', () => deadOf().length > 0); // emitted once the entry is dead
        expect(await entryOf(keyOf(payload))).toMatchObject({ status: 'dead', attempts: 1 });

        expect(await rowsOf(payload.transaction_id)).toBe(1);
        expect(attempts).toBe(1);
        expect(deadOf().map((event) => event.lastError)).toEqual([
          expect.stringMatching(
            /^a listener of 'successful' failed: the order service is down; a listener ended the delivery transaction of .+ itself through tx \(a raw COMMIT, in \w+\), so its writes landed, or may have, outside it: neither retried/,
          ),
        ]);
      },
    );

    // The check for a landed commit must not keep a plain failure dead (retried, one row after the retry),
    // nor miss a COMMIT that a raw BEGIN and a failed statement followed (dead at once, one row).
    test.each<[string, 'retried' | 'dead', string[]]>([
      ['a raw ROLLBACK', 'retried', ['ROLLBACK']],
      ['a savepoint rolled back to', 'retried', ['SAVEPOINT mine', 'ROLLBACK TO SAVEPOINT mine']],
      ['a statement that fails', 'retried', ['SELECT * FROM no_such_table_here']],
      [
        'a raw COMMIT, a raw BEGIN, a statement that fails',
        'dead',
        ['COMMIT', 'BEGIN', 'SELECT * FROM nope'],
      ],
    ])(
      'a listener that credits, sends %s through tx, then throws: %s, one row',
      async (_what, expected, statements) => {
        const { ipn, post } = await serve(router());
        const payload = uniquePayload();
        ipn.on('successful', async (n, { tx, attempt }) => {
          await orm.credit(tx, n);
          if (attempt > 1 || n.transaction_id !== payload.transaction_id) return;
          for (const statement of statements) await orm.raw(tx, statement).catch(() => {});
          throw new Error('the order service is down');
        });

        expect((await post(payload)).status).toBe(200);
        const status = expected === 'dead' ? 'dead' : 'delivered';
        await eventually(status, async () => (await entryOf(keyOf(payload)))?.status === status);
        expect(await entryOf(keyOf(payload))).toMatchObject({ attempts: expected === 'dead' ? 1 : 2 });
        expect(await rowsOf(payload.transaction_id)).toBe(1);
      },
    );

    // A deadlock that a listener catches: InnoDB rolled the whole transaction back, the credit with it, and
    // the session autocommits after it (MariaDB 10.11), where the mark would commit with no ledger row.
    // Knex only: after a deadlock, Sequelize refuses the transaction's queries (the money is safe) but its
    // connection is not given back, and sequelize.close() then hangs (found here, left as it is: not ipn-kit's).
    // `thenCredits`: the listener credits again after the deadlock (its own retry of the statement).
    const creditsAcrossDeadlock = (thenCredits: boolean) => async () => {
      const locks = `${table}_locks`;
      await pool.query(`CREATE TABLE ${locks} (id INT PRIMARY KEY)`);
      await pool.query(`INSERT INTO ${locks} VALUES (1), (2)`);
      const other = await pool.getConnection();
      try {
        const { ipn, post } = await serve(router());
        const recorder = recordEvents(ipn);
        const waits: Array<Promise<unknown>> = [];
        ipn.on('successful', async (n, { tx, attempt }) => {
          await orm.credit(tx, n);
          if (attempt > 1) return;
          await orm.raw(tx, `UPDATE ${locks} SET id = id WHERE id = 1`);
          // Another session, heavier (InnoDB rolls back the lighter one), takes row 2 and waits for row 1.
          await other.query('START TRANSACTION');
          await other.query(`INSERT INTO ${locks} VALUES (10), (11), (12), (13), (14), (15), (16), (17)`);
          await other.query(`UPDATE ${locks} SET id = id WHERE id = 2`);
          waits.push(
            other.query(`UPDATE ${locks} SET id = id WHERE id = 1`).then(() => other.query('ROLLBACK')),
          );
          await waitsForRowLock(pool, other.threadId, 'the other session waits for row 1');
          const error = await orm
            .raw(tx, `UPDATE ${locks} SET id = id WHERE id = 2`)
            .catch((e: unknown) => e);
          expect(String((error as Error)?.message)).toMatch(/deadlock/i);
          if (thenCredits) await orm.credit(tx, n);
        });
        const payload = uniquePayload();

        expect((await post(payload)).status).toBe(200);
        await delivered(keyOf(payload));
        await Promise.all(waits);

        expect(await rowsOf(payload.transaction_id)).toBe(1);
        expect(await entryOf(keyOf(payload))).toMatchObject({ attempts: 2 });
        expect(recorder.of('error').map((event) => event.error.message)).toEqual([
          expect.stringContaining('deadlock'),
        ]);
      } finally {
        other.release();
        await pool.query(`DROP TABLE IF EXISTS ${locks}`);
      }
    };
    (name === 'Knex' ? test : test.skip)(
      'a listener that credits, catches a deadlock that rolled it back, and resolves: never delivered without its row',
      creditsAcrossDeadlock(false),
    );
    // Known gap: the credit sent after the deadlock autocommitted; the mark finds the savepoint gone and no
    // count moved, takes it for a rollback, and the retry credits a second time (2 rows).
    (name === 'Knex' ? test.failing : test.skip)(
      'a listener that credits, catches a deadlock, credits again, and resolves: one ledger row',
      creditsAcrossDeadlock(true),
    );

    /**
     * A listener that sends `statements` through tx on its first attempt, after its credit (each one's error
     * caught), then resolves: the payment must end with one ledger row, delivered (after `attempts`, when
     * given).
     */
    const creditsOnceAfter = async (statements: (made: string) => string[], attempts?: number) => {
      const made = `${table}_made`;
      const { ipn, post } = await serve(router());
      ipn.on('successful', async (n, { tx, attempt }) => {
        await orm.credit(tx, n);
        if (attempt > 1) return;
        for (const statement of statements(made)) await orm.raw(tx, statement).catch(() => {});
      });
      const payload = uniquePayload();
      try {
        expect((await post(payload)).status).toBe(200);
        await delivered(keyOf(payload));
        expect(await rowsOf(payload.transaction_id)).toBe(1);
        if (attempts !== undefined) expect(await entryOf(keyOf(payload))).toMatchObject({ attempts });
      } finally {
        await pool.query(`DROP TABLE IF EXISTS ${made}`);
      }
    };

    // The guard's own savepoint, by the name a listener could read in ipn-kit's source (rolled back to, it
    // undid the credit, then marked delivered; released, it failed the attempt, before the name got a suffix
    // no listener can know), and statements that end no transaction: none fails the attempt.
    test.each<[string, (made: string) => string[]]>([
      ['ROLLBACK TO SAVEPOINT ipn_kit_delivery', () => ['ROLLBACK TO SAVEPOINT ipn_kit_delivery']],
      ['RELEASE SAVEPOINT ipn_kit_delivery', () => ['RELEASE SAVEPOINT ipn_kit_delivery']],
      ['SET autocommit = 1', () => ['SET autocommit = 1']],
      ['XA START (refused in a transaction)', () => ["XA START 'ipn_kit_xa'", "XA END 'ipn_kit_xa'"]],
      [
        'CREATE TEMPORARY TABLE (no implicit commit)',
        (made) => [`CREATE TEMPORARY TABLE ${made} (a INT)`, `DROP TEMPORARY TABLE ${made}`],
      ],
    ])(
      'a listener that sends %s through tx, then resolves: one ledger row, delivered on its first attempt',
      (_what, statements) => creditsOnceAfter(statements, 1),
    );

    // A statement that commits implicitly (DDL, LOCK TABLES, a raw BEGIN), or a raw COMMIT then a ROLLBACK,
    // ends the transaction with the credit committed, or maybe committed. Before, the guard read only the
    // counts of COMMIT and ROLLBACK statements, took each for a rollback, and the retry credited a second
    // time (2 rows). Now the implicit commits are counted too, and each is kept dead at once: neither marked
    // (a deadlock's rollback, which moves no count, may have come with it) nor retried.
    test.each<[string, (made: string) => string[]]>([
      ['CREATE TABLE (an implicit commit)', (made) => [`CREATE TABLE ${made} (a INT)`]],
      [
        'LOCK TABLES and UNLOCK TABLES (an implicit commit)',
        () => [`LOCK TABLES ${ledger} WRITE`, 'UNLOCK TABLES'],
      ],
      ['a raw BEGIN (an implicit commit)', () => ['BEGIN']],
      [
        'a raw COMMIT, a write, then a raw ROLLBACK',
        () => ['COMMIT', `UPDATE ${ledger} SET amount = amount WHERE 1 = 0`, 'ROLLBACK'],
      ],
      // Implicit commits whose counts the list named one by one missed (MariaDB 10.11): each was taken for a
      // deadlock's rollback, and the retry credited a second time (2 rows).
      ['CREATE SEQUENCE (an implicit commit)', (made) => [`CREATE SEQUENCE ${made}`]],
      // It moves Com_create_sequence up and Com_create_table down (MariaDB 10.11): a sum of counts stays.
      ['CREATE TEMPORARY SEQUENCE (an implicit commit)', (made) => [`CREATE TEMPORARY SEQUENCE ${made}`]],
      [
        'CREATE ROLE and DROP ROLE (implicit commits)',
        (made) => [`CREATE ROLE ${made}`, `DROP ROLE ${made}`],
      ],
      ['SET autocommit = 0, then 1 (an implicit commit)', () => ['SET autocommit = 0', 'SET autocommit = 1']],
    ])(
      'a listener that sends %s through tx, then resolves: one ledger row, kept dead, not retried',
      async (_what, statements) => {
        const made = `${table}_made`;
        const { ipn, post } = await serve(router());
        const recorder = recordEvents(ipn);
        const payload = uniquePayload();
        let attempts = 0;
        ipn.on('successful', async (n, { tx }) => {
          if (n.transaction_id === payload.transaction_id) attempts += 1;
          await orm.credit(tx, n);
          for (const statement of statements(made)) await orm.raw(tx, statement).catch(() => {});
        });
        const deadOf = () => recorder.of('dead').filter((event) => event.key === keyOf(payload));
        try {
          expect((await post(payload)).status).toBe(200);
          await eventually('dead', () => deadOf().length > 0);
          expect(await rowsOf(payload.transaction_id)).toBe(1);
          expect(attempts).toBe(1);
          expect(await entryOf(keyOf(payload))).toMatchObject({ status: 'dead', attempts: 1 });
          expect(deadOf()[0]?.lastError).toMatch(
            /^a listener ended the delivery transaction of .+ itself through tx \(.+\), so its writes landed, or may have/,
          );
        } finally {
          await pool.query(`DROP TABLE IF EXISTS ${made}`);
        }
      },
    );

    // Known, and documented (docs/orm.md, On MySQL): MySQL's SET is not transactional, and the connection is
    // the ORM's, which ipn-kit cannot reset as it resets its own: a listener's session setting stays on it, for
    // the app's next use of that connection. (On PostgreSQL it is undone before the mark: orm-pgbouncer.test.ts.)
    // Not fixed (issue 32): COM_RESET_CONNECTION would have to run after the ORM's COMMIT, on a connection the
    // ORM has already taken back, and it undoes the ORM's own session setup (Sequelize's time_zone) and the
    // pool's; putting back system variables read from information_schema.SESSION_VARIABLES (675 rows on
    // MariaDB 10.11, two readings a delivery) meets variables that move by themselves (TIMESTAMP,
    // LAST_INSERT_ID, RAND_SEED1: setting them back would freeze NOW()), ones refused inside a transaction
    // (sql_log_bin) or that end it (autocommit), and leaves user variables (MySQL 8 lists them only in
    // performance_schema) and temporary tables (no view lists them on MariaDB 10.11) on the connection.
    test.failing("a listener's SET SESSION through tx ends with its delivery", async () => {
      const ipn = router();
      let connection: unknown;
      const read = (tx: unknown) =>
        orm.transactions.query(tx, {
          text: 'SELECT CONNECTION_ID() AS id, @@session.wait_timeout AS timeout',
          values: [],
          returns: 'rows',
        });
      ipn.on('successful', async (n, { tx }) => {
        await orm.raw(tx, 'SET SESSION wait_timeout = 77');
        connection = (await read(tx)).rows[0]?.id;
        await orm.credit(tx, n);
      });
      const { post } = await serve(ipn);
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      await delivered(keyOf(payload));
      // The app's next transactions on the ORM, until one is on the delivery's connection.
      for (let tries = 0; tries < 20; tries += 1) {
        const { rows } = await orm.transactions.transaction((tx) => read(tx));
        if (String(rows[0]?.id) !== String(connection)) continue;
        expect(Number(rows[0]?.timeout)).not.toBe(77);
        return;
      }
      // Not found again: no leak was seen. Thrown, so that this known failure does not fail the run either
      // way (test.failing fails a body that returns).
      throw new Error(
        `the delivery's connection ${String(connection)} was not taken again in 20 transactions`,
      );
    });

    test("the store's ? statements run inside the ORM's transaction: rows, counts, and a ? inside a literal", async () => {
      const id = `TX-${name}-${process.pid}-${Date.now()}`;
      const { transactions } = orm;
      const inserted = await transactions.transaction(async (tx) => {
        const insert = await transactions.query(tx, {
          text: `INSERT INTO ${ledger} (transaction_id, amount) VALUES (?, ?), (?, ?)`,
          values: [id, 1, id, 2],
          returns: 'count',
        });
        // The transaction's own write is seen inside it; a '?' in a literal is no placeholder.
        const read = await transactions.query(tx, {
          text: `SELECT amount, 'why?' AS q FROM ${ledger} WHERE transaction_id = ? ORDER BY amount`,
          values: [id],
          returns: 'rows',
        });
        expect(read.rows).toEqual([
          { amount: 1, q: 'why?' },
          { amount: 2, q: 'why?' },
        ]);
        expect(read.count).toBe(2);
        return insert.count;
      });
      expect(inserted).toBe(2);
      // An update that matches a row and changes it counts it; one that matches none counts 0.
      const update = (amount: number) =>
        transactions.execute!({
          text: `UPDATE ${ledger} SET amount = amount + 10 WHERE transaction_id = ? AND amount = ?`,
          values: [id, amount],
          returns: 'count',
        });
      expect((await update(1)).count).toBe(1);
      expect((await update(1)).count).toBe(0);
      const listed = await transactions.execute!({
        text: `SELECT amount FROM ${ledger} WHERE transaction_id = ? AND amount IN (?) ORDER BY amount`,
        values: [id, [2, 11]],
        returns: 'rows',
      });
      expect(listed.rows).toEqual([{ amount: 2 }, { amount: 11 }]);
    });
  });
});

describeWithService(
  'MariaDB',
  'the documented MySQL setups (examples/snippets/orm/knex-mysql.ts, sequelize-mysql.ts)',
  () => {
    // A database of this file's own: the snippets use the default names, ipn_inbox and ledger.
    const database = `ipn_myorm_docs_${process.pid}_${Date.now() % 100_000}`;
    const url = (() => {
      const parsed = new URL(mysqlUrl());
      parsed.pathname = `/${database}`;
      return parsed.toString();
    })();
    let admin: Pool;
    let pool: Pool;
    beforeAll(async () => {
      admin = createPool({ uri: mysqlUrl(), connectionLimit: 1 });
      await admin.query(`CREATE DATABASE ${database}`);
      pool = createPool({ uri: url, connectionLimit: 4 });
      // No unique key: a second credit of a payment is a second row.
      await pool.query(
        'CREATE TABLE ledger (transaction_id VARCHAR(255) NOT NULL, order_id VARCHAR(255), amount DECIMAL(12, 2))',
      );
      await pool.query(
        'CREATE TABLE orders (id VARCHAR(255) PRIMARY KEY, transaction_id VARCHAR(255) NOT NULL, amount DECIMAL(12, 2) NOT NULL, paid_at DATETIME NULL)',
      );
    });
    afterAll(async () => {
      await pool?.end();
      await admin.query(`DROP DATABASE IF EXISTS ${database}`);
      await admin.end();
    });
    const serve = servedRouters();
    const rowsOf = async (id: unknown): Promise<number> => {
      const [rows] = await pool.query<RowDataPacket[]>(
        'SELECT COUNT(*) AS n FROM ledger WHERE transaction_id = ?',
        [id],
      );
      return Number(rows[0]?.n);
    };
    const insertOrder = (order: OrderRow) =>
      pool.query(
        'INSERT INTO orders (id, transaction_id, amount, paid_at) VALUES (?, ?, ?, IF(?, NOW(), NULL))',
        [order.id, order.transactionId, order.amount, order.paid],
      );

    test.each([
      [
        'Knex',
        () => {
          const db = knex({ client: 'mysql2', connection: url, pool: { min: 0, max: 4 } });
          return { ...knexLedgerRouter(pool, db), close: () => db.destroy() };
        },
      ],
      [
        'Sequelize',
        () => {
          const sequelize = new Sequelize(url, { dialect: 'mysql', logging: false, pool: { max: 4 } });
          return { ...sequelizeLedgerRouter(pool, sequelize), close: () => sequelize.close() };
        },
      ],
    ])('%s: a notification posted twice credits the ledger once', async (_name, open) => {
      const { ipn, store, close } = open();
      try {
        await store.migrate();
        const { post } = await serve(ipn);
        const payload = orderPayment();
        await insertOrder(orderOf(payload));
        expect((await post(payload)).status).toBe(200);
        expect((await post(payload)).status).toBe(200);
        await eventually('delivered', async () => {
          const entry = await store.get(`${String(payload.transaction_id)}:SUCCESSFUL`);
          return entry?.status === 'delivered';
        });
        expect(await rowsOf(payload.transaction_id)).toBe(1);

        // Another amount, another transaction, an unknown order, an order already paid: nothing credited.
        const refused = refusedPayments();
        for (const { why, payload: other, order } of refused) {
          if (order) await insertOrder(order);
          expect((await post(other)).status).toBe(200);
          const key = `${String(other.transaction_id)}:SUCCESSFUL`;
          await eventually(`${why}: failed`, async () =>
            ['failed', 'dead'].includes((await store.get(key))?.status ?? ''),
          );
          expect({ why, error: (await store.get(key))?.lastError }).toEqual({
            why,
            error: expect.stringMatching(NOT_THE_PAYMENT),
          });
          expect({ why, credited: await rowsOf(other.transaction_id) }).toEqual({ why, credited: 0 });
        }
        const [paid] = await pool.query<RowDataPacket[]>(
          'SELECT id FROM orders WHERE id IN (?) AND paid_at IS NOT NULL',
          [refused.map(({ payload: other }) => other.custom_data)],
        );
        expect(paid).toEqual([{ id: refused[3]?.order?.id }]); // only the order paid before
        await ipn.close();
      } finally {
        await close();
      }
    });
  },
);
