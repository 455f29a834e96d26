import { randomUUID } from 'node:crypto';
import {
  createPool,
  type Pool,
  type PoolConnection,
  type PoolOptions,
  type RowDataPacket,
} from 'mysql2/promise';
import { ipnRouter, type IpnNotification } from 'ipn-kit';
import { MysqlStore } from 'ipn-kit/mysql';
import { runStoreConformance } from 'ipn-kit/testing';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { servedRouters } from '../helpers/servers.js';
import { describeWithService, eventually, mysqlUrl } from '../helpers/services.js';
import { CLEANUP_TIMEOUT_MS, dropMysqlInboxes } from '../helpers/drop-inboxes.js';

jest.setTimeout(60_000);

/**
 * A hostile review of MysqlStore: listeners that end the delivery's transaction early in ways MySQL allows
 * (an executable comment, DDL, LOCK TABLES, autocommit), pools made with options that change what mysql2
 * returns, and non-ASCII text in custom_data through a pool of the 3-byte utf8 charset.
 */
describeWithService('MariaDB', 'MysqlStore under hostile listeners and pools', () => {
  const suffix = `${process.pid}_${Date.now() % 100_000}`;
  const table = `ipn_myh_${suffix}`;
  const ledger = `ledger_myh_${suffix}`;
  const pools: Pool[] = [];
  const newPool = (options: PoolOptions = {}): Pool => {
    const created = createPool({ uri: mysqlUrl(), connectionLimit: 6, ...options });
    pools.push(created);
    return created;
  };
  let pool: Pool;
  const tables: string[] = [table, `${table}_expected`, ledger];
  beforeAll(async () => {
    pool = newPool();
    await new MysqlStore({ pool, table }).migrate();
    await pool.query(`CREATE TABLE ${ledger} (transaction_id VARCHAR(255) NOT NULL, amount DOUBLE)`);
  });
  afterAll(async () => {
    await pool.query('UNLOCK TABLES');
    await dropMysqlInboxes(pool, tables);
    await Promise.all(pools.map((each) => each.end()));
  }, CLEANUP_TIMEOUT_MS);
  const serve = servedRouters();
  const router = (on: Pool = pool) =>
    ipnRouter({
      store: new MysqlStore({ pool: on, table }),
      delivery: 'at-least-once',
      logger: quiet,
      retryDelayMs: 20,
      recoveryIntervalMs: 50,
    });
  const keyOf = (payload: Record<string, unknown>) => `${String(payload.transaction_id)}:SUCCESSFUL`;
  const statusOf = async (key: string) => {
    const [rows] = await pool.query<RowDataPacket[]>(`SELECT status FROM ${table} WHERE \`key\` = ?`, [key]);
    return rows[0]?.status as string | undefined;
  };
  const rowsOf = async (id: unknown): Promise<number> => {
    const [rows] = await pool.query<RowDataPacket[]>(
      `SELECT COUNT(*) AS n FROM ${ledger} WHERE transaction_id = ?`,
      [id],
    );
    return Number(rows[0]?.n);
  };
  const credit = (db: { query(sql: string, values?: unknown[]): Promise<unknown> }, n: IpnNotification) =>
    db.query(`INSERT INTO ${ledger} (transaction_id, amount) VALUES (?, ?)`, [n.transaction_id, n.amount]);

  describe('a listener that would commit the delivery early through db', () => {
    // Each statement commits the open transaction in MySQL: the credit would land while the attempt then
    // fails, and the retry would credit again. Each must be refused before it reaches the server.
    test.each([
      ['an executable comment /*!COMMIT*/', '/*!COMMIT*/'],
      ["MariaDB's executable comment /*M!100000 COMMIT */", '/*M!100000 COMMIT */'],
      ['DDL (CREATE TABLE)', `CREATE TABLE ${table}_ddl (a INT)`],
      ['LOCK TABLES', `LOCK TABLES ${ledger} WRITE`],
      ['SET autocommit = 0', 'SET autocommit = 0'],
    ])('%s, then a failed first attempt: the payment is credited once', async (_what, statement) => {
      tables.push(`${table}_ddl`);
      const { ipn, post } = await serve(router());
      ipn.on('successful', async (n, { db, attempt }) => {
        await credit(db, n);
        if (attempt === 1) {
          await db.query(statement).catch(() => {}); // refused or not: the attempt fails after it
          throw new Error('the order service is down');
        }
      });
      const payload = uniquePayload();

      expect((await post(payload)).status).toBe(200);
      await eventually('delivered', async () => (await statusOf(keyOf(payload))) === 'delivered');

      expect(await rowsOf(payload.transaction_id)).toBe(1);
    });

    test('SET autocommit = 0 through db leaves no connection of the pool that answers a receive before committing it', async () => {
      const single = newPool({ connectionLimit: 1 });
      const store = new MysqlStore({ pool: single, table });
      const first = `${randomUUID()}:SUCCESSFUL`;
      const lease = { id: randomUUID(), ms: 60_000 };
      expect(await store.receive(first, { transaction_id: first.split(':')[0] }, lease)).toBe(true);
      const opened = (await store.begin(first, lease.id))!;
      const db = opened.db!;
      await db.query('SET autocommit = 0').catch(() => {});
      await db.query(`INSERT INTO ${ledger} (transaction_id, amount) VALUES (?, 1)`, [first]);
      expect(await opened.commit()).toBe('delivered');

      // The next receive on the pool's only connection: answered true is a 200 to the service.
      const second = `${randomUUID()}:SUCCESSFUL`;
      expect(await store.receive(second, { transaction_id: second.split(':')[0] }, lease)).toBe(true);

      // Another instance (another pool) sees it: it is committed, not waiting in an open transaction.
      expect(await statusOf(second)).toBe('received');
    });
  });

  test('two instances, each with its own pool, under a burst sent to both (twice each): every payment delivered, credited once; a 503 only ever asks for a resend', async () => {
    const [one, two] = [await serve(router(newPool())), await serve(router(newPool()))];
    for (const { ipn } of [one, two]) {
      ipn.on('successful', async (n, { db }) => {
        await credit(db, n);
      });
    }
    const payloads = Array.from({ length: 40 }, () => uniquePayload());
    /** Posts until the service would stop resending: a 200. */
    const deliver = async (post: typeof one.post, payload: Record<string, unknown>) => {
      for (;;) {
        const { status } = await post(payload);
        if (status === 200) return;
        expect(status).toBe(503);
      }
    };
    await Promise.all(
      payloads.flatMap((payload) => [
        deliver(one.post, payload),
        deliver(two.post, payload),
        deliver(one.post, payload),
        deliver(two.post, payload),
      ]),
    );

    for (const payload of payloads) {
      await eventually('delivered', async () => (await statusOf(keyOf(payload))) === 'delivered');
    }
    for (const payload of payloads) expect(await rowsOf(payload.transaction_id)).toBe(1);
  });

  // A SET a listener sends through db changes the session of a connection the pool hands out again: with
  // NO_BACKSLASH_ESCAPES (which migrate() refuses on its own session), mysql2's backslash escapes reach the
  // server as written: a later receive on that connection fails (an escaped quote ends the string: a syntax
  // error, 503 for every notification that connection carries) or stores another record than it was given.
  test("a listener's SET sql_mode through db does not change how the pool's next receive stores a record", async () => {
    const single = newPool({ connectionLimit: 1 });
    const store = new MysqlStore({ pool: single, table });
    const first = `${randomUUID()}:SUCCESSFUL`;
    const lease = { id: randomUUID(), ms: 60_000 };
    expect(await store.receive(first, { transaction_id: first.split(':')[0] }, lease)).toBe(true);
    const opened = (await store.begin(first, lease.id))!;
    await opened.db!.query("SET sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')").catch(() => {});
    expect(await opened.commit()).toBe('delivered');

    const second = `${randomUUID()}:SUCCESSFUL`;
    const record = { transaction_id: second.split(':')[0], custom_data: 'Ndèye "Awa" \\ o\'k' };
    await store.receive(second, record, lease).catch(() => {});

    expect((await new MysqlStore({ pool, table }).get(second))?.record).toEqual(record);
  });

  describe("a listener's session state through db ends with its attempt", () => {
    /** One attempt on `store` whose listener sends `statements` through db, then commits or fails. */
    const attempt = async (store: MysqlStore, statements: string[], outcome: 'commit' | 'rollback') => {
      const key = `${randomUUID()}:SUCCESSFUL`;
      const lease = { id: randomUUID(), ms: 60_000 };
      expect(await store.receive(key, { transaction_id: key.split(':')[0] }, lease)).toBe(true);
      const opened = (await store.begin(key, lease.id))!;
      for (const statement of statements) await opened.db!.query(statement);
      if (outcome === 'commit') expect(await opened.commit()).toBe('delivered');
      else await opened.rollback();
      return key;
    };
    const scratch = `ipn_myh_scratch_${suffix}`;
    const session = async (on: Pool) => {
      const [rows] = await on.query<RowDataPacket[]>(
        'SELECT @@SESSION.time_zone AS zone, @@SESSION.sql_mode AS mode, @marker AS marker',
      );
      // A temporary table is seen only by its session: found, it is still on this connection.
      const temporary = await on.query(`SELECT 1 FROM ${scratch}`).then(
        () => true,
        () => false,
      );
      return { ...(rows[0] as { zone: string; mode: string; marker: unknown }), temporary };
    };

    test.each(['commit', 'rollback'] as const)(
      'SET time_zone, sql_mode, a user variable and a temporary table, then a %s: the next statement on the connection sees none of them',
      async (outcome) => {
        const single = newPool({ connectionLimit: 1 });
        const store = new MysqlStore({ pool: single, table });
        const before = await session(single);
        await attempt(
          store,
          [
            "SET time_zone = '+05:00'",
            "SET sql_mode = 'NO_BACKSLASH_ESCAPES,ANSI_QUOTES'",
            "SET @marker = 'listener'",
            `CREATE TEMPORARY TABLE ${scratch} (a INT)`,
          ],
          outcome,
        );

        expect(before.temporary).toBe(false);
        expect(await session(single)).toEqual(before);
      },
    );

    test("a pool with a 'connection' listener (a session setup) keeps it: the connection a listener used is replaced, and the setup runs on the new one", async () => {
      const single = newPool({ connectionLimit: 1 });
      let setups = 0;
      single.on('connection', (connection) => {
        setups += 1;
        void connection.query("SET SESSION time_zone = '+03:00'");
      });
      const store = new MysqlStore({ pool: single, table });
      expect((await session(single)).zone).toBe('+03:00');
      await attempt(store, ["SET time_zone = '+05:00'"], 'commit');

      expect((await session(single)).zone).toBe('+03:00');
      expect(setups).toBe(2);
    });

    test('a connection whose reset fails is closed, not given back to the pool', async () => {
      const single = newPool({ connectionLimit: 1 });
      const destroyed: unknown[] = [];
      const failing = {
        query: (sql: string, values?: unknown) => single.query(sql, values as never),
        getConnection: async () => {
          const connection = await single.getConnection();
          return Object.assign(Object.create(connection) as typeof connection, {
            reset: () => Promise.reject(new Error('the server went away')),
            destroy: () => {
              destroyed.push(connection.threadId);
              connection.destroy();
            },
          });
        },
      };
      const store = new MysqlStore({ pool: failing, table });
      await attempt(store, ["SET time_zone = '+05:00'"], 'commit');

      expect(destroyed).toHaveLength(1);
      const [[row]] = await single.query<RowDataPacket[]>(
        'SELECT CONNECTION_ID() AS id, @@SESSION.time_zone AS zone',
      );
      expect(row!.id).not.toBe(destroyed[0]);
      expect(row!.zone).not.toBe('+05:00');
    });

    test.each([
      ['USE', (db: PoolConnection) => db.query('USE mysql')],
      ['USE in an executable comment', (db: PoolConnection) => db.query('/*!USE mysql */')],
      ['reset()', (db: PoolConnection) => db.reset()],
      ['changeUser()', (db: PoolConnection) => db.changeUser({ database: 'mysql' })],
    ])('%s through db is refused with the reason, and the payment is delivered once', async (what, call) => {
      const { ipn, post } = await serve(router());
      const refusals: unknown[] = [];
      ipn.on('successful', async (n, { db, attempt: number }) => {
        await credit(db, n);
        if (number === 1) await call(db).catch((error: unknown) => refusals.push(error));
      });
      const payload = uniquePayload();

      expect((await post(payload)).status).toBe(200);
      await eventually('delivered', async () => (await statusOf(keyOf(payload))) === 'delivered');

      expect(await rowsOf(payload.transaction_id)).toBe(1);
      expect(refusals).toHaveLength(1);
      expect(String(refusals[0])).toMatch(what.startsWith('USE') ? /sent USE through db/ : /db\.\w+\(\)/);
    });
  });

  describe('pools made with options that change what mysql2 returns', () => {
    let conformed = 0;
    test.each<[string, PoolOptions]>([
      ['supportBigNumbers and bigNumberStrings', { supportBigNumbers: true, bigNumberStrings: true }],
      ['dateStrings', { dateStrings: true }],
      ['namedPlaceholders', { namedPlaceholders: true }],
      ['a time zone of +05:00', { timezone: '+05:00' }],
      ["MySQL's 3-byte utf8 charset", { charset: 'utf8' }],
    ])(
      'MysqlStore over a pool with %s conforms',
      async (_what, options) => {
        const optioned = newPool(options);
        const other = newPool(options);
        const createStore = async () => {
          // Numbered across the whole file: numbered per case (with 4 random hex), two cases' tables of one
          // rule could share a name, the second case then reading the first's rows (seen once in CI).
          const name = `ipn_myh_c${suffix}_${(conformed += 1)}`;
          tables.push(name, `${name}_expected`);
          const store = new MysqlStore({ pool: optioned, table: name });
          await store.migrate();
          return store;
        };
        const result = await runStoreConformance(createStore, {
          openPeer: (store) => new MysqlStore({ pool: other, table: (store as MysqlStore).table }),
        });
        expect(result.failures).toEqual([]);
      },
      180_000,
    );
  });

  describe('custom_data outside ASCII', () => {
    // mysql2 encodes a statement in the pool's charset: with 'utf8' (utf8mb3) as CESU-8, where a 4-byte
    // character goes as its two surrogate halves, 3 bytes each, which a utf8mb4 column would keep as such;
    // with 'latin1', as a '?'. The record is exact (it is stored as ASCII), and custom_data and the search
    // text go as hex, so that the operator's search (list customDataContains, the admin page) finds the text
    // whatever the charset of the pool that received it or searches it.
    test.each([
      ['an emoji', 'utf8', 'order 😀 7', '😀'],
      ['a flag', 'utf8', 'order 🇸🇳', '🇸🇳'],
      ['an accented capital, searched in lower case', 'utf8', 'Commande ÉTÉ', 'été'],
      ['an emoji', 'latin1', 'order 😀 7', '😀'],
    ])(
      "%s in custom_data, received through a pool of charset '%s': stored and found by list through either pool",
      async (_what, charset, customData, search) => {
        const narrow = newPool({ charset });
        const store = new MysqlStore({ pool: narrow, table });
        const wide = new MysqlStore({ pool, table });
        const key = `${randomUUID()}:SUCCESSFUL`;
        const record = { transaction_id: key.split(':')[0], custom_data: customData };

        expect(await store.receive(key, record, { id: randomUUID(), ms: 60_000 })).toBe(true);

        expect((await wide.get(key))?.record).toEqual(record);
        expect((await wide.list({ customDataContains: search })).map((e) => e.key)).toContain(key);
        expect((await store.list({ customDataContains: search })).map((e) => e.key)).toContain(key);
        const [[row]] = await pool.query<RowDataPacket[]>(
          `SELECT custom_data FROM ${table} WHERE \`key\` = ?`,
          [key],
        );
        expect(row!.custom_data).toBe(customData);
      },
    );

    test.each(['utf8', 'latin1'])(
      "through a pool of charset '%s': an expectation's custom_data and a failure's message read back exactly",
      async (charset) => {
        const store = new MysqlStore({ pool: newPool({ charset }), table });
        const wide = new MysqlStore({ pool, table });
        const transactionId = randomUUID();
        const customData = 'order 😀 7 · Été';
        await store.expectations.put({
          transactionId,
          customData,
          amount: 5,
          expectedAt: 1,
          dueAt: 2,
          attempts: 0,
        });
        expect((await store.expectations.get(transactionId))?.customData).toBe(customData);
        expect((await wide.expectations.get(transactionId))?.customData).toBe(customData);
        expect(
          (await store.expectations.takeDue(3, 4, 100)).find((e) => e.transactionId === transactionId)
            ?.customData,
        ).toBe(customData);

        const key = `${transactionId}:SUCCESSFUL`;
        const lease = { id: randomUUID(), ms: 60_000 };
        expect(
          await store.receive(key, { transaction_id: transactionId, custom_data: customData }, lease),
        ).toBe(true);
        const error = 'the ledger refused order 😀 7 · Été';
        expect(await store.settle(key, lease.id, { status: 'dead', error })).toBe(true);
        expect((await store.get(key))?.lastError).toBe(error);
        expect((await wide.get(key))?.lastError).toBe(error);
        const [[row]] = await pool.query<RowDataPacket[]>(
          `SELECT last_error FROM ${table} WHERE \`key\` = ?`,
          [key],
        );
        expect(row!.last_error).toBe(error);
      },
    );
  });
});
