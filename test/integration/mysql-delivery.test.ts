import knex, { type Knex } from 'knex';
import { createPool, type Pool, type RowDataPacket } from 'mysql2/promise';
import { ipnRouter, type IpnNotification } from 'ipn-kit';
import { MysqlStore } from 'ipn-kit/mysql';
import type { Transactions } from 'ipn-kit/orm';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { servedRouters } from '../helpers/servers.js';
import { waitsForRowLock } from '../helpers/mysql-lock-wait.js';
import { describeWithService, eventually, mysqlUrl } from '../helpers/services.js';

jest.setTimeout(30_000);

describeWithService('MariaDB', "transactional delivery: MysqlStore, delivery: 'at-least-once'", () => {
  const suffix = `${process.pid}_${Date.now() % 100_000}`;
  const table = `ipn_myd_${suffix}`;
  const ledger = `ledger_myd_${suffix}`;
  const pools: Pool[] = [];
  const newPool = (connectionLimit = 6): Pool => {
    const pool = createPool({ uri: mysqlUrl(), connectionLimit });
    pools.push(pool);
    return pool;
  };
  let pool: Pool;
  beforeAll(async () => {
    pool = newPool();
    await new MysqlStore({ pool, table }).migrate();
    // No unique key: a second credit of a payment is a second row.
    await pool.query(`CREATE TABLE ${ledger} (transaction_id VARCHAR(255) NOT NULL, amount DOUBLE)`);
  });
  afterAll(async () => {
    await pool.query(`DROP TABLE IF EXISTS ${table}, ${table}_expected, ${ledger}`);
    await Promise.all(pools.map((each) => each.end()));
  });
  const serve = servedRouters();

  const router = (options: { leaseMs?: number; on?: Pool } = {}) => {
    const { on = pool, ...rest } = options;
    return ipnRouter({
      store: new MysqlStore({ pool: on, table }),
      delivery: 'at-least-once',
      logger: quiet,
      retryDelayMs: 20,
      recoveryIntervalMs: 50,
      ...rest,
    });
  };
  const keyOf = (payload: Record<string, unknown>) => `${String(payload.transaction_id)}:SUCCESSFUL`;
  const entryOf = async (key: string) => {
    const [rows] = await pool.query<RowDataPacket[]>(
      `SELECT status, attempts, last_error FROM ${table} WHERE \`key\` = ?`,
      [key],
    );
    return rows[0] as { status: string; attempts: number; last_error: string | null } | undefined;
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
  const credit = (db: { query(sql: string, values: unknown[]): Promise<unknown> }, n: IpnNotification) =>
    db.query(`INSERT INTO ${ledger} (transaction_id, amount) VALUES (?, ?)`, [n.transaction_id, n.amount]);

  test('a notification posted twice credits the ledger once; every listener shares one connection as tx and db', async () => {
    const { ipn, post } = await serve(router());
    const connections: unknown[] = [];
    ipn.on('notification', async (_n, { tx, db }) => {
      expect(tx).toBe(db);
      const [rows] = await db.query<RowDataPacket[]>('SELECT CONNECTION_ID() AS id');
      connections.push(rows[0]?.id);
    });
    ipn.on('successful', async (n, { db }) => {
      await credit(db, n);
      const [rows] = await db.query<RowDataPacket[]>('SELECT CONNECTION_ID() AS id');
      connections.push(rows[0]?.id);
    });
    const payload = uniquePayload();

    expect((await post(payload)).status).toBe(200);
    expect(await (await post(payload)).json()).toEqual({ ok: true, duplicate: true });
    await delivered(keyOf(payload));

    expect(await rowsOf(payload.transaction_id)).toBe(1);
    expect(connections).toHaveLength(2);
    expect(new Set(connections).size).toBe(1);
  });

  test('a listener that credits through db, then throws on its first attempt: one row after the retry', async () => {
    const { ipn, post } = await serve(router());
    const recorder = recordEvents(ipn);
    ipn.on('successful', async (n, { db, attempt }) => {
      await credit(db, n);
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
    ipn.on('successful', async (n, { db, attempt, key }) => {
      attempts.push(attempt);
      await credit(db, n);
      if (attempt === 1) {
        // Another instance takes the entry meanwhile (its lease runs out after leaseMs, then it is retried).
        await pool.query(`UPDATE ${table} SET lease_id = 'another-instance' WHERE \`key\` = ?`, [key]);
      }
    });
    const payload = uniquePayload();

    expect((await post(payload)).status).toBe(200);
    await delivered(keyOf(payload));

    expect(attempts).toEqual([1, 2]);
    expect(await rowsOf(payload.transaction_id)).toBe(1);
  });

  test('a listener that runs past its time, then credits: that late credit is refused or rolled back, never committed', async () => {
    const { ipn, post } = await serve(router({ leaseMs: 1_000 }));
    const late: Array<Promise<unknown>> = [];
    ipn.on('successful', async (n, { db, attempt }) => {
      if (attempt === 1) {
        await credit(db, n); // the connection is taken: the attempt's transaction is open
        const again = new Promise((resolve) => setTimeout(resolve, 1_200)).then(() => credit(db, n));
        late.push(again.catch((error: unknown) => error));
        await again;
        return;
      }
      await credit(db, n);
    });
    const payload = uniquePayload();

    expect((await post(payload)).status).toBe(200);
    await delivered(keyOf(payload));
    const [refusal] = await Promise.all(late);

    expect(refusal).toBeInstanceOf(Error);
    expect(await rowsOf(payload.transaction_id)).toBe(1);
    expect(await entryOf(keyOf(payload))).toMatchObject({ attempts: 2 });
  });

  test('listeners that do not query db hold no connection: five deliveries at once on a pool of two', async () => {
    const small = newPool(2);
    const { ipn, post } = await serve(router({ on: small }));
    let started = 0;
    let allStarted!: () => void;
    const barrier = new Promise<void>((resolve) => (allStarted = resolve));
    ipn.on('successful', async (n) => {
      started += 1;
      if (started === 5) allStarted();
      await barrier; // only once all five run at once
      await small.query(`INSERT INTO ${ledger} (transaction_id, amount) VALUES (?, ?)`, [
        n.transaction_id,
        n.amount,
      ]);
    });
    const payloads = Array.from({ length: 5 }, () => uniquePayload());

    const answers = await Promise.all(payloads.map((payload) => post(payload)));
    expect(answers.map((answer) => answer.status)).toEqual([200, 200, 200, 200, 200]);
    for (const payload of payloads) await delivered(keyOf(payload));

    for (const payload of payloads) expect(await rowsOf(payload.transaction_id)).toBe(1);
  });

  test("a listener's own transaction on db runs as a savepoint: its rollback undoes only its writes, and nothing commits early", async () => {
    const { ipn, post } = await serve(router());
    ipn.on('successful', async (n, { db, attempt }) => {
      await credit(db, n);
      await db.beginTransaction();
      await credit(db, n); // undone by the rollback just below
      await db.rollback();
      await db.query('START TRANSACTION');
      await db.query('COMMIT'); // a nested commit: never the delivery's
      if (attempt === 1) throw new Error('not yet');
    });
    const payload = uniquePayload();

    expect((await post(payload)).status).toBe(200);
    await delivered(keyOf(payload));

    expect(await rowsOf(payload.transaction_id)).toBe(1);
  });

  test("a listener's write through db that fails and that nothing awaits fails the attempt (MySQL would commit the rest without it); one row after the retry", async () => {
    const { ipn, post } = await serve(router());
    const recorder = recordEvents(ipn);
    let attempts = 0;
    ipn.on('successful', async (n, { db }) => {
      attempts += 1;
      // The first attempt's credit goes to a table that does not exist, and the listener forgets to await it.
      const into = attempts === 1 ? `${ledger}_missing` : ledger;
      if (attempts === 1)
        void db.query(`INSERT INTO ${into} (transaction_id, amount) VALUES (?, ?)`, [
          n.transaction_id,
          n.amount,
        ]);
      else await credit(db, n);
    });
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await delivered(keyOf(payload));
    expect(await rowsOf(payload.transaction_id)).toBe(1);
    expect(await entryOf(keyOf(payload))).toMatchObject({ status: 'delivered', attempts: 2 });
    expect(recorder.of('error').map((event) => event.error.message)).toEqual([
      expect.stringMatching(
        /a query a listener made through db failed, and nothing awaited it: .*doesn't exist/,
      ),
    ]);
  });

  test("a listener that awaits a failing write and catches it goes on in the transaction (MySQL's choice): delivered on the first attempt", async () => {
    const { ipn, post } = await serve(router());
    ipn.on('successful', async (n, { db }) => {
      await db
        .query(`INSERT INTO ${ledger}_missing (transaction_id) VALUES (?)`, [n.transaction_id])
        .catch(() => {});
      await credit(db, n);
    });
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await delivered(keyOf(payload));
    expect(await rowsOf(payload.transaction_id)).toBe(1);
    expect(await entryOf(keyOf(payload))).toMatchObject({ status: 'delivered', attempts: 1 });
  });

  test('a write through db once the attempt has ended is refused, and lands nowhere', async () => {
    const { ipn, post } = await serve(router());
    let kept: { query(sql: string, values: unknown[]): Promise<unknown> } | undefined;
    ipn.on('successful', async (n, { db }) => {
      kept = db;
      await credit(db, n);
    });
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await delivered(keyOf(payload));

    await expect(credit(kept!, payload as unknown as IpnNotification)).rejects.toThrow(/has ended/);

    expect(await rowsOf(payload.transaction_id)).toBe(1);
  });

  test('a listener that catches a deadlock (InnoDB rolled its transaction back) cannot write on outside it: one row after the retry', async () => {
    const locks = `locks_myd_${suffix}`;
    await pool.query(`CREATE TABLE ${locks} (id INT PRIMARY KEY, v INT NOT NULL)`);
    await pool.query(`INSERT INTO ${locks} (id, v) VALUES (1, 0), (2, 0)`);
    const other = await pool.getConnection();
    try {
      const { ipn, post } = await serve(router());
      const caught: unknown[] = [];
      let lockedOne!: () => void;
      const listenerHoldsOne = new Promise<void>((resolve) => (lockedOne = resolve));
      let otherWaits!: () => void;
      const otherIsWaiting = new Promise<void>((resolve) => (otherWaits = resolve));
      ipn.on('successful', async (n, { db, attempt }) => {
        if (attempt === 1) {
          await db.query(`UPDATE ${locks} SET v = v + 1 WHERE id = 1`);
          lockedOne();
          await otherIsWaiting;
          // Row 2 is the other transaction's, which waits for row 1: a deadlock. InnoDB rolls back the
          // lighter transaction, this one, and the statements after it would commit one by one.
          await db
            .query(`UPDATE ${locks} SET v = v + 1 WHERE id = 2`)
            .catch((error: unknown) => caught.push(error));
        }
        await credit(db, n);
        if (attempt === 1) throw new Error('not yet');
      });
      // The other transaction: heavier (more rows changed), so that InnoDB picks the listener's as victim.
      await other.query('START TRANSACTION');
      await other.query(`UPDATE ${locks} SET v = v + 1 WHERE id = 2`);
      await other.query(
        `INSERT INTO ${ledger} (transaction_id, amount) VALUES ${Array(50).fill("('weight', 0)").join(', ')}`,
      );
      const payload = uniquePayload();

      expect((await post(payload)).status).toBe(200);
      await listenerHoldsOne;
      const waiting = other.query(`UPDATE ${locks} SET v = v + 1 WHERE id = 1`);
      await waitsForRowLock(pool, other.threadId, 'the other transaction waits for row 1');
      otherWaits();
      await waiting;
      await other.query('ROLLBACK');
      await delivered(keyOf(payload));

      expect(caught).toEqual([expect.objectContaining({ errno: 1213 })]);
      expect(await rowsOf(payload.transaction_id)).toBe(1);
    } finally {
      other.release();
      await pool.query(`DROP TABLE IF EXISTS ${locks}`);
    }
  });

  test("with an ORM's transactions (Knex on mysql2), listeners write through its tx: posted twice and a failed attempt, one row", async () => {
    const orm = knex({ client: 'mysql2', connection: mysqlUrl(), pool: { min: 0, max: 4 } });
    try {
      const transactions: Transactions<Knex.Transaction> = {
        name: 'Knex',
        transaction: (work) => orm.transaction(work),
        async query(trx, statement) {
          const [result] = (await trx.raw(statement.text, statement.values as never[])) as [unknown];
          const rows = Array.isArray(result) ? (result as Array<Record<string, unknown>>) : [];
          const count = Array.isArray(result)
            ? rows.length
            : Number((result as { affectedRows: number }).affectedRows);
          return { rows, count };
        },
      };
      const ipn = ipnRouter({
        store: new MysqlStore({ pool, table, transactions }),
        delivery: 'at-least-once',
        logger: quiet,
        retryDelayMs: 20,
        recoveryIntervalMs: 50,
      });
      const { post } = await serve(ipn);
      const seen: unknown[] = [];
      ipn.on('successful', async (n, { tx, db, attempt }) => {
        seen.push(db);
        await tx.raw(`INSERT INTO ${ledger} (transaction_id, amount) VALUES (?, ?)`, [
          n.transaction_id,
          n.amount,
        ]);
        if (attempt === 1) throw new Error('not yet');
      });
      const payload = uniquePayload();

      expect((await post(payload)).status).toBe(200);
      expect((await post(payload)).status).toBe(200);
      await delivered(keyOf(payload));

      expect(await rowsOf(payload.transaction_id)).toBe(1);
      expect(seen).toEqual([undefined, undefined]); // no raw db beside the ORM's tx
    } finally {
      await orm.destroy();
    }
  });
});
