import { randomUUID } from 'node:crypto';
import { Client, Pool, Query, type PoolClient } from 'pg';
import {
  asSavepoint,
  openTransaction,
  splitStatements,
  type DeliveredMark,
} from '../../../lib/stores/postgres/postgres-transaction.js';
import { LEASE_LOST } from '../../../lib/stores/postgres/postgres-sql.js';
import { databaseUrl, describeWithService } from '../../helpers/services.js';

/**
 * `openTransaction` against a real PostgreSQL: what it promises (both writes or neither, the lease guard,
 * no client held or leaked) is about what the database does with BEGIN, COMMIT and ROLLBACK, which a fake
 * client would only pretend to do.
 */
describeWithService('PostgreSQL', 'openTransaction', () => {
  const suffix = `${process.pid}_${randomUUID().slice(0, 8)}`;
  const inbox = `ipn_ptx_inbox_${suffix}`;
  const ledger = `ipn_ptx_ledger_${suffix}`;
  let pool: Pool;

  beforeAll(async () => {
    pool = new Pool({ connectionString: databaseUrl(), max: 4 });
    await pool.query(`CREATE TABLE ${inbox} (key text PRIMARY KEY, lease_id text, status text NOT NULL)`);
    await pool.query(`CREATE TABLE ${ledger} (key text NOT NULL, note text NOT NULL)`);
  });
  afterAll(async () => {
    await pool.query(`DROP TABLE IF EXISTS ${inbox}, ${ledger}`);
    await pool.end();
  });

  /** A pool that hands out `pool`'s clients and records how each was given back. */
  function watchedPool(from: () => Pool = () => pool) {
    const released: Array<boolean | Error | undefined> = [];
    let connects = 0;
    const watched = {
      Client,
      connect: async (): Promise<PoolClient> => {
        connects += 1;
        const client = await from().connect();
        const release = client.release.bind(client);
        client.release = (destroy?: boolean | Error) => {
          released.push(destroy);
          release(destroy);
        };
        return client;
      },
    };
    return { watched, released, connects: () => connects };
  }

  /** A received entry leased to `leaseId`, and the mark that delivers it while that lease holds it. */
  async function entry(leaseId = randomUUID(), combined = false) {
    const key = `EFB.${randomUUID()}:SUCCESSFUL`;
    await pool.query(`INSERT INTO ${inbox} VALUES ($1, $2, 'received')`, [key, leaseId]);
    const update = `UPDATE ${inbox} SET status = 'delivered', lease_id = NULL WHERE key = $1 AND lease_id = $2`;
    const mark: DeliveredMark = {
      statement: [update, [key, leaseId]],
      andCommit: (before) =>
        combined
          ? `${before}DO $ipn_kit$ BEGIN
               UPDATE ${inbox} SET status = 'delivered', lease_id = NULL
               WHERE key = '${key}' AND lease_id = '${leaseId}';
               IF NOT FOUND THEN RAISE EXCEPTION 'lost' USING ERRCODE = '${LEASE_LOST}'; END IF;
             END $ipn_kit$; COMMIT`
          : undefined,
    };
    return { key, mark };
  }

  const statusOf = async (key: string): Promise<unknown> =>
    (await pool.query<{ status: string }>(`SELECT status FROM ${inbox} WHERE key = $1`, [key])).rows[0]
      ?.status;
  const notesOf = async (key: string): Promise<string[]> =>
    (
      await pool.query<{ note: string }>(`SELECT note FROM ${ledger} WHERE key = $1 ORDER BY note`, [key])
    ).rows.map((row) => row.note);

  type Db = { query: (text: string, values?: unknown[]) => Promise<unknown> };

  test('listeners that never query db take no client: commit is the batched mark alone', async () => {
    const { watched, connects } = watchedPool();
    const { key, mark } = await entry();
    const markWithout = jest.fn(() => Promise.resolve(true));
    const tx = await openTransaction(watched, key, mark, markWithout);
    expect(tx.state).toBe('idle');
    await expect(tx.commit()).resolves.toBe('delivered');
    expect(markWithout).toHaveBeenCalledTimes(1);
    expect(connects()).toBe(0);
    expect(await statusOf(key)).toBe('received'); // the batched mark (here a fake) does the write
  });

  test.each([
    ['a statement, then COMMIT', false],
    ['the mark and COMMIT in one query', true],
  ])("the listeners' writes and the delivered mark commit together (%s)", async (_how, combined) => {
    const { watched, released } = watchedPool();
    const { key, mark } = await entry(randomUUID(), combined);
    const tx = await openTransaction(watched, key, mark, () => Promise.reject(new Error('not used')));
    const db = tx.db as Db;
    await db.query(`INSERT INTO ${ledger} VALUES ($1, 'credited')`, [key]);
    expect(tx.state).toBe('open');
    expect(await notesOf(key)).toEqual([]); // not visible outside the transaction before the commit
    await expect(tx.commit()).resolves.toBe('delivered');
    expect(await notesOf(key)).toEqual(['credited']);
    expect(await statusOf(key)).toBe('delivered');
    expect(released).toEqual([undefined]); // given back to the pool, not destroyed
  });

  test.each([
    ['a statement, then COMMIT', false],
    ['the mark and COMMIT in one query', true],
  ])(
    "a lease lost meanwhile rolls the writes back, and commit resolves 'lost' (%s)",
    async (_how, combined) => {
      const { watched, released } = watchedPool();
      const { key, mark } = await entry(randomUUID(), combined);
      const tx = await openTransaction(watched, key, mark, () => Promise.reject(new Error('not used')));
      await (tx.db as Db).query(`INSERT INTO ${ledger} VALUES ($1, 'credited')`, [key]);
      await pool.query(`UPDATE ${inbox} SET lease_id = 'another-attempt' WHERE key = $1`, [key]);
      await expect(tx.commit()).resolves.toBe('lost');
      expect(await notesOf(key)).toEqual([]);
      expect(await statusOf(key)).toBe('received');
      expect(released).toEqual([undefined]);
    },
  );

  test('queries a listener started without awaiting them land before the mark, one at a time', async () => {
    const { watched } = watchedPool();
    const { key, mark } = await entry();
    const tx = await openTransaction(watched, key, mark, () => Promise.reject(new Error('not used')));
    const db = tx.db as Db;
    for (const note of ['a', 'b', 'c']) void db.query(`INSERT INTO ${ledger} VALUES ($1, $2)`, [key, note]);
    await expect(tx.commit()).resolves.toBe('delivered');
    expect(await notesOf(key)).toEqual(['a', 'b', 'c']);
  });

  test('rollback undoes the writes, gives the client back, and refuses every later query', async () => {
    const { watched, released } = watchedPool();
    const { key, mark } = await entry();
    const tx = await openTransaction(watched, key, mark, () => Promise.reject(new Error('not used')));
    const db = tx.db as Db;
    await db.query(`INSERT INTO ${ledger} VALUES ($1, 'credited')`, [key]);
    await tx.rollback();
    expect(released).toEqual([undefined]);
    await expect(db.query(`INSERT INTO ${ledger} VALUES ($1, 'late')`, [key])).rejects.toThrow(
      `the delivery transaction of ${key} has ended`,
    );
    await expect(tx.commit()).rejects.toThrow(/has ended/);
    expect(await notesOf(key)).toEqual([]);
  });

  test('an abandoned attempt destroys its client instead of waiting for a listener still running', async () => {
    const { watched, released } = watchedPool();
    const { key, mark } = await entry();
    const tx = await openTransaction(watched, key, mark, () => Promise.reject(new Error('not used')));
    await (tx.db as Db).query(`INSERT INTO ${ledger} VALUES ($1, 'credited')`, [key]);
    await tx.rollback(Promise.resolve());
    expect(released).toEqual([true]);
    expect(await notesOf(key)).toEqual([]); // the server rolled back what the closed connection held
  });

  test('an attempt abandoned once its mark has answered, before the COMMIT, never resolves delivered', async () => {
    const { watched, released } = watchedPool();
    let answered!: () => void;
    const gate = new Promise<void>((resolve) => (answered = resolve));
    let marked!: () => void;
    const markAnswered = new Promise<void>((resolve) => (marked = resolve));
    const gated = {
      Client,
      connect: async () => {
        const client = await watched.connect();
        const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>;
        Object.assign(client, {
          query: async (...args: unknown[]) => {
            const result = await query(...args);
            if (String(args[0]).startsWith('UPDATE')) {
              marked();
              await gate; // the mark has answered; the COMMIT waits
            }
            return result;
          },
        });
        return client;
      },
    };
    const { key, mark } = await entry();
    const tx = await openTransaction(gated, key, mark, () => Promise.reject(new Error('not used')));
    await (tx.db as Db).query(`INSERT INTO ${ledger} VALUES ($1, 'credited')`, [key]);
    const committing = tx.commit();
    committing.catch(() => {});
    await markAnswered;
    await tx.rollback(Promise.resolve()); // the commit timed out: its connection is closed
    answered();
    await expect(committing).rejects.toThrow(/has ended/);
    expect(released).toEqual([true]);
    expect(await notesOf(key)).toEqual([]);
    expect(await statusOf(key)).toBe('received');
  });

  test('a pool that cannot hand out a client fails the query and the commit; nothing is held', async () => {
    const { key, mark } = await entry();
    const refusing = { connect: () => Promise.reject(new Error('too many clients already')) };
    const tx = await openTransaction(refusing, key, mark, () => Promise.reject(new Error('not used')));
    await expect((tx.db as Db).query('SELECT 1')).rejects.toThrow('too many clients already');
    await expect(tx.commit()).rejects.toThrow('too many clients already');
    expect(await statusOf(key)).toBe('received');
  });

  const settled = <T>(promise: Promise<T>, ms = 500): Promise<'settled' | 'pending'> =>
    Promise.race([
      promise.then(
        () => 'settled' as const,
        () => 'settled' as const,
      ),
      new Promise<'pending'>((resolve) => setTimeout(() => resolve('pending'), ms)),
    ]);

  test.each([
    ['abandoned', Promise.resolve()],
    // The old code returned at once (no client held yet): a pool that is exhausted, or whose connect()
    // hangs (an unreachable database, no connectionTimeoutMillis), must not hang the attempt's rollback.
    ['rolled back', undefined],
  ])(
    'a client handed out after the attempt ended (%s) goes straight back to the pool; the end waits for none',
    async (_how, listeners) => {
      let handOut: (() => void) | undefined;
      const { watched, released } = watchedPool();
      const slow = {
        connect: () => new Promise<PoolClient>((resolve) => (handOut = () => resolve(watched.connect()))),
      };
      const { key, mark } = await entry();
      const tx = await openTransaction(slow, key, mark, () => Promise.reject(new Error('not used')));
      const query = (tx.db as Db).query(`INSERT INTO ${ledger} VALUES ($1, 'credited')`, [key]);
      query.catch(() => {});
      const ending = tx.rollback(listeners);
      const outcome = await settled(ending);
      handOut!();
      await expect(query).rejects.toThrow(/has ended/);
      await ending;
      expect(outcome).toBe('settled');
      expect(released).toEqual([undefined]);
      expect(await notesOf(key)).toEqual([]);
    },
  );

  test("an 'error' the connection emits mid-attempt fails the commit and destroys the client", async () => {
    const { watched, released } = watchedPool();
    const { key, mark } = await entry();
    const tx = await openTransaction(watched, key, mark, () => Promise.reject(new Error('not used')));
    const db = tx.db as Db & { emit: (event: string, error: Error) => boolean };
    await db.query(`INSERT INTO ${ledger} VALUES ($1, 'credited')`, [key]);
    db.emit('error', new Error('terminating connection due to administrator command'));
    await expect(tx.commit()).rejects.toThrow('terminating connection');
    expect(released).toEqual([true]);
    expect(await notesOf(key)).toEqual([]);
    expect(await statusOf(key)).toBe('received');
  });

  test("db before its first query is a client of the pool's class, and its release() does nothing", async () => {
    const { watched, connects } = watchedPool();
    const { key, mark } = await entry();
    const tx = await openTransaction(watched, key, mark, () => Promise.resolve(true));
    expect(tx.db).toBeInstanceOf(Client);
    (tx.db as { release: () => void }).release();
    expect(connects()).toBe(0);
    await tx.rollback();
  });

  describe("an ORM's BEGIN, COMMIT and ROLLBACK sent through db", () => {
    test('BEGIN and COMMIT become a savepoint: nothing commits before the delivery does', async () => {
      const { watched } = watchedPool();
      const { key, mark } = await entry();
      const tx = await openTransaction(watched, key, mark, () => Promise.reject(new Error('not used')));
      const db = tx.db as Db;
      await db.query('BEGIN;'); // as knex.transaction(fn, { connection: db }) sends it
      await db.query(`INSERT INTO ${ledger} VALUES ($1, 'inner')`, [key]);
      await db.query('commit'); // as drizzle's .transaction() sends it
      expect(await notesOf(key)).toEqual([]); // still inside the delivery's transaction
      await tx.rollback(); // the attempt failed after all: the "committed" write goes with it
      expect(await notesOf(key)).toEqual([]);
    });

    test('a ROLLBACK rolls back to the savepoint only; the delivery then commits the rest', async () => {
      const { watched } = watchedPool();
      const { key, mark } = await entry();
      const tx = await openTransaction(watched, key, mark, () => Promise.reject(new Error('not used')));
      const db = tx.db as Db;
      await db.query(`INSERT INTO ${ledger} VALUES ($1, 'outer')`, [key]);
      await db.query('START TRANSACTION');
      await db.query(`INSERT INTO ${ledger} VALUES ($1, 'inner')`, [key]);
      await db.query('ROLLBACK');
      await db.query('BEGIN');
      await db.query('BEGIN'); // nested, as an ORM's nested transaction might
      await db.query(`INSERT INTO ${ledger} VALUES ($1, 'nested')`, [key]);
      await db.query('COMMIT');
      await db.query('END');
      await expect(tx.commit()).resolves.toBe('delivered');
      expect(await notesOf(key)).toEqual(['nested', 'outer']);
      expect(await statusOf(key)).toBe('delivered');
    });

    test.each([
      ['a COMMIT with no BEGIN before it', 'COMMIT'],
      ['a ROLLBACK with no BEGIN before it', 'rollback'],
      ['BEGIN with options', 'BEGIN ISOLATION LEVEL SERIALIZABLE'],
      ['a COMMIT after another statement', `INSERT INTO ${'x'} VALUES (1); COMMIT`],
      ['PREPARE TRANSACTION', "PREPARE TRANSACTION 'x'"],
    ])('%s is refused with an error naming the fix, and commits nothing', async (_what, text) => {
      const { watched } = watchedPool();
      const { key, mark } = await entry();
      const tx = await openTransaction(watched, key, mark, () => Promise.reject(new Error('not used')));
      const db = tx.db as Db;
      await db.query(`INSERT INTO ${ledger} VALUES ($1, 'credited')`, [key]);
      await expect(db.query(text)).rejects.toThrow(
        /ipn-kit begins and commits that transaction itself.*ipn-kit\/orm/,
      );
      await tx.rollback();
      expect(await notesOf(key)).toEqual([]);
    });

    test('a BEGIN refused as a submittable opens no savepoint: a COMMIT after it is refused, not a release', async () => {
      const { watched } = watchedPool();
      const { key, mark } = await entry();
      const tx = await openTransaction(watched, key, mark, () => Promise.reject(new Error('not used')));
      const db = tx.db as Db & { query: (query: Query) => Query };
      try {
        await db.query(`INSERT INTO ${ledger} VALUES ($1, 'credited')`, [key]);
        const begin = new Query('BEGIN');
        const refused = new Promise((resolve) => begin.once('error', resolve));
        db.query(begin);
        expect(String(await refused)).toMatch(/as a submittable query through db/);
        // No savepoint was sent: this COMMIT has no BEGIN before it, and is refused as such.
        await expect(db.query('COMMIT')).rejects.toThrow(
          /ipn-kit begins and commits that transaction itself/,
        );
        await expect(tx.commit()).resolves.toBe('delivered');
        expect(await notesOf(key)).toEqual(['credited']);
      } finally {
        await tx.rollback(); // a failed expectation holds no client (the pool's end would wait for it)
      }
    });

    test('a statement that only mentions COMMIT in a string, a comment or a dollar quote runs as it is', async () => {
      const { watched } = watchedPool();
      const { key, mark } = await entry();
      const tx = await openTransaction(watched, key, mark, () => Promise.reject(new Error('not used')));
      const db = tx.db as Db;
      await db.query(`INSERT INTO ${ledger} VALUES ('${key}', '; COMMIT'); -- ; commit`);
      await db.query(`INSERT INTO ${ledger} VALUES ('${key}', $q$; ROLLBACK$q$) /* ; begin */`);
      await expect(tx.commit()).resolves.toBe('delivered');
      expect(await notesOf(key)).toEqual(['; COMMIT', '; ROLLBACK']);
    });
  });

  test('splitStatements splits on semicolons outside quotes, dollar quotes and comments', () => {
    expect(splitStatements("SELECT 'a;b'; SELECT $x$;$x$ -- c;d\n; /* e;f */ COMMIT;")).toEqual([
      "SELECT 'a;b'",
      ' SELECT $x$;$x$  \n', // comments are left out: a space in their place
      '   COMMIT',
    ]);
    // No `;` and no comment opener: the text itself, read either way (the scan is skipped); blank: none.
    for (const text of [
      'INSERT INTO ledger (transaction_id, amount) VALUES ($1, $2)',
      `SELECT 'it''s', "q""x", $x$ a $x$, E'\\'', '\\' AS y`,
      "SELECT 'unterminated",
    ]) {
      expect(splitStatements(text)).toEqual([text]);
      expect(splitStatements(text, true)).toEqual([text]);
    }
    expect(splitStatements(' \n ')).toEqual([]);
    expect(splitStatements("SELECT ';' -- c")).toEqual(["SELECT ';'  "]);
    expect(splitStatements('SELECT 1 /* c */')).toEqual(['SELECT 1  ']);
    expect(asSavepoint('SELECT 1', 0, 'k')).toBeUndefined();
    expect(asSavepoint('rollback to savepoint sp1', 1, 'k')).toBeUndefined(); // an ORM's own nested one
    expect(asSavepoint('ROLLBACK TRANSACTION TO sp1', 1, 'k')).toBeUndefined();
    expect(() => asSavepoint('ROLLBACK AND CHAIN', 1, 'k')).toThrow(/ipn-kit begins and commits/);
    expect(asSavepoint('begin work', 2, 'k')).toEqual({ text: 'SAVEPOINT ipn_kit_2', depth: 3 });
    expect(asSavepoint('COMMIT TRANSACTION;', 3, 'k')).toEqual({
      text: 'RELEASE SAVEPOINT ipn_kit_2',
      depth: 2,
    });
  });

  test.each([
    '/* flush */ COMMIT',
    '-- flush\nCOMMIT',
    'SELECT 1;/**/COMMIT',
    '/* a /* nested */ comment */ END',
    "SELECT E'\\'' AS x; COMMIT; SELECT 1 AS y --'", // E'\'' is one quote: the COMMIT is outside
    "SELECT '\\'' AS x; COMMIT; SELECT 1 AS y --'", // as standard_conforming_strings = off reads it
    'SELECT 1 AS a$b$; COMMIT; SELECT 1 AS a$b$', // a$b$ is an identifier, not a dollar quote
    '/* undo */ ROLLBACK',
  ])('asSavepoint reads %j as PostgreSQL does: a transaction statement, refused', (text) => {
    expect(() => asSavepoint(text, 0, 'k')).toThrow(/ipn-kit begins and commits/);
    // Inside a listener's BEGIN: a savepoint's end, or refused; never run as it is.
    const runsAsItIs = () => {
      try {
        return asSavepoint(text, 1, 'k') === undefined;
      } catch {
        return false;
      }
    };
    expect(runsAsItIs()).toBe(false);
  });

  test('asSavepoint leaves a COMMIT inside a literal, a dollar quote or a comment alone, and maps a commented BEGIN', () => {
    expect(asSavepoint("SELECT 'x; COMMIT'", 0, 'k')).toBeUndefined();
    expect(asSavepoint("SELECT E'\\\\'; SELECT 1", 0, 'k')).toBeUndefined(); // E'\\' is one backslash
    expect(asSavepoint('SELECT $f$; COMMIT $f$', 0, 'k')).toBeUndefined();
    expect(asSavepoint('SELECT $1::text -- ; COMMIT', 0, 'k')).toBeUndefined();
    expect(asSavepoint('/* a /* b */ ; COMMIT */ SELECT 1', 0, 'k')).toBeUndefined();
    expect(asSavepoint("/* traceparent='00-1' */ BEGIN", 0, 'k')).toEqual({
      text: 'SAVEPOINT ipn_kit_0',
      depth: 1,
    });
    expect(asSavepoint("COMMIT /* traceparent='00-1' */", 1, 'k')).toEqual({
      text: 'RELEASE SAVEPOINT ipn_kit_0',
      depth: 0,
    });
  });

  // A hostile review of the pool seam (pool-transaction.ts) this path runs through.

  test.each([false, true])(
    "a listener that kills its own backend: the commit fails, nothing lands, no 'error' escapes (combined: %s)",
    async (combined) => {
      const { watched, released } = watchedPool();
      const { key, mark } = await entry(randomUUID(), combined);
      const tx = await openTransaction(watched, key, mark, () => Promise.reject(new Error('not used')));
      const db = tx.db as Db;
      await db.query(`INSERT INTO ${ledger} VALUES ($1, 'credited')`, [key]);
      await expect(db.query('SELECT pg_terminate_backend(pg_backend_pid())')).rejects.toThrow();
      await new Promise((resolve) => setTimeout(resolve, 50));
      await expect(tx.commit()).rejects.toThrow();
      expect(released).toEqual([true]);
      expect(await notesOf(key)).toEqual([]);
      expect(await statusOf(key)).toBe('received');
    },
  );

  test.each([false, true])(
    'another backend kills the connection between the listener and the mark (combined: %s)',
    async (combined) => {
      const { watched, released } = watchedPool();
      const { key, mark } = await entry(randomUUID(), combined);
      const tx = await openTransaction(watched, key, mark, () => Promise.reject(new Error('not used')));
      const db = tx.db as Db;
      const { rows } = (await db.query('SELECT pg_backend_pid() AS pid')) as { rows: Array<{ pid: number }> };
      await db.query(`INSERT INTO ${ledger} VALUES ($1, 'credited')`, [key]);
      const pid = rows[0]!.pid;
      await pool.query('SELECT pg_terminate_backend($1)', [pid]);
      await new Promise((resolve) => setTimeout(resolve, 100));
      await expect(tx.commit()).rejects.toThrow();
      expect(released).toEqual([true]);
      expect(await notesOf(key)).toEqual([]);
      expect(await statusOf(key)).toBe('received');
    },
  );

  test.each([
    ['a comment before SET', '/* app */ SET search_path TO pg_catalog'],
    ['SET after a comment line', '-- tenant\nSET statement_timeout = 1234'],
    ['a quoted set_config', `SELECT "set_config"('statement_timeout', '1234', false)`],
    // It sets default_transaction_read_only for the session: the store's next write on the client would fail.
    ['SET SESSION CHARACTERISTICS', 'SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY'],
  ])(
    'a session setting made through db (%s) does not outlive the delivery on the pooled client',
    async (_what, text) => {
      const single = new Pool({ connectionString: databaseUrl(), max: 1 });
      try {
        const before = (
          await single.query<{ s: string; t: string; r: string }>(
            "SELECT current_setting('search_path') AS s, current_setting('statement_timeout') AS t, current_setting('default_transaction_read_only') AS r",
          )
        ).rows[0];
        for (const combined of [false, true]) {
          const { watched } = watchedPool(() => single);
          const { key, mark } = await entry(randomUUID(), combined);
          const tx = await openTransaction(watched, key, mark, () => Promise.reject(new Error('not used')));
          const db = tx.db as Db;
          await db.query(`INSERT INTO public.${ledger} VALUES ($1, 'credited')`, [key]);
          await db.query(text);
          await expect(tx.commit()).resolves.toBe('delivered');
          const after = (
            await single.query<{ s: string; t: string; r: string }>(
              "SELECT current_setting('search_path') AS s, current_setting('statement_timeout') AS t, current_setting('default_transaction_read_only') AS r",
            )
          ).rows[0];
          expect(after).toEqual(before);
        }
      } finally {
        await single.end();
      }
    },
  );

  test('pool of one: many concurrent deliveries writing through db all commit, none deadlocks', async () => {
    const single = new Pool({ connectionString: databaseUrl(), max: 1 });
    try {
      const keys = await Promise.all(
        Array.from({ length: 8 }, async (_, i) => {
          const { watched } = watchedPool(() => single);
          const { key, mark } = await entry(randomUUID(), i % 2 === 0);
          const tx = await openTransaction(watched, key, mark, () => Promise.reject(new Error('not used')));
          const db = tx.db as Db;
          void db.query(`INSERT INTO ${ledger} VALUES ($1, 'a')`, [key]);
          await db.query(`INSERT INTO ${ledger} VALUES ($1, 'b')`, [key]);
          if (i % 3 === 0) {
            await tx.rollback();
            return { key, delivered: false };
          }
          await expect(tx.commit()).resolves.toBe('delivered');
          return { key, delivered: true };
        }),
      );
      for (const { key, delivered } of keys) {
        expect(await notesOf(key)).toEqual(delivered ? ['a', 'b'] : []);
        expect(await statusOf(key)).toBe(delivered ? 'delivered' : 'received');
      }
      expect(single.totalCount - single.idleCount).toBe(0);
    } finally {
      await single.end();
    }
  }, 20000);

  test.each([false, true])(
    'a COMMIT the server refuses (a deferred constraint) is never said delivered (combined: %s)',
    async (combined) => {
      const parent = `ipn_ptx_parent_${suffix}`;
      const child = `ipn_ptx_child_${suffix}`;
      await pool.query(`CREATE TABLE IF NOT EXISTS ${parent} (id int PRIMARY KEY)`);
      await pool.query(
        `CREATE TABLE IF NOT EXISTS ${child} (id int REFERENCES ${parent} DEFERRABLE INITIALLY DEFERRED)`,
      );
      try {
        const { watched, released } = watchedPool();
        const { key, mark } = await entry(randomUUID(), combined);
        const tx = await openTransaction(watched, key, mark, () => Promise.reject(new Error('not used')));
        const db = tx.db as Db;
        await db.query(`INSERT INTO ${ledger} VALUES ($1, 'credited')`, [key]);
        await db.query(`INSERT INTO ${child} VALUES (42)`); // fails only at COMMIT
        await expect(tx.commit()).rejects.toThrow(/foreign key/);
        expect(released).toHaveLength(1);
        expect(await notesOf(key)).toEqual([]);
        expect(await statusOf(key)).toBe('received');
      } finally {
        await pool.query(`DROP TABLE IF EXISTS ${child}, ${parent}`);
      }
    },
  );

  describe('fake pools (timing)', () => {
    const rejections: unknown[] = [];
    const onRejection = (reason: unknown): void => void rejections.push(reason);
    beforeEach(() => {
      rejections.length = 0;
      process.on('unhandledRejection', onRejection);
    });
    afterEach(() => void process.off('unhandledRejection', onRejection));
    const tick = () => new Promise((resolve) => setTimeout(resolve, 20));
    const mark: DeliveredMark = { statement: ['UPDATE x', []], andCommit: () => undefined };

    /** A client whose every query waits for `gate` (when given), and records what it ran. */
    function fakeClient(gates: Map<string, Promise<void>>) {
      const ran: string[] = [];
      const released: unknown[] = [];
      const listeners = new Set<(error: unknown) => void>();
      const client = {
        query: async (text: unknown) => {
          const t = typeof text === 'string' ? text : String((text as { text?: string }).text);
          ran.push(t);
          await gates.get(t);
          return { rowCount: 1, rows: [] };
        },
        release: (destroy?: unknown) => void released.push(destroy),
        on: (_: string, f: (error: unknown) => void) => void listeners.add(f),
        removeListener: (_: string, f: (error: unknown) => void) => void listeners.delete(f),
      };
      return { client, ran, released, listeners };
    }

    /** An attempt on a fake client whose `text` waits until `answer()`. */
    async function gatedOn(text: string) {
      let answer!: () => void;
      const fake = fakeClient(new Map([[text, new Promise<void>((resolve) => (answer = resolve))]]));
      const tx = await openTransaction({ connect: () => Promise.resolve(fake.client) }, 'K', mark, () =>
        Promise.resolve(true),
      );
      return { fake, tx, answer: () => answer() };
    }

    test('connect() rejecting after the attempt was abandoned: no unhandled rejection, nothing held', async () => {
      let fail!: (error: Error) => void;
      const pending = { connect: () => new Promise<never>((_, reject) => (fail = reject)) };
      const tx = await openTransaction(pending, 'K', mark, () => Promise.resolve(true));
      const query = (tx.db as Db).query('INSERT 1');
      const callback = jest.fn();
      (tx.db as { query: (t: string, v: unknown[], cb: unknown) => void }).query('INSERT 2', [], callback);
      await tx.rollback(Promise.resolve());
      fail(new Error('connection refused'));
      await expect(query).rejects.toThrow();
      await tick();
      expect(callback).toHaveBeenCalledWith(expect.any(Error));
      expect(rejections).toEqual([]);
    });

    test('BEGIN answering after the attempt was abandoned: the client is closed, never given back mid-transaction', async () => {
      const { fake, tx, answer } = await gatedOn('BEGIN');
      const query = (tx.db as Db).query('INSERT 1');
      await tick();
      await tx.rollback(Promise.resolve());
      answer();
      await expect(query).rejects.toThrow(/has ended/);
      await tick();
      expect(fake.released).toEqual([true]);
      expect(fake.ran).toEqual(['BEGIN']);
      expect(fake.listeners.size).toBe(0);
      expect(rejections).toEqual([]);
    });

    test('rollback() while BEGIN is on its way: ROLLBACK after it, the client given back once, no listener write', async () => {
      const { fake, tx, answer } = await gatedOn('BEGIN');
      const query = (tx.db as Db).query('INSERT 1');
      await tick();
      const rolling = tx.rollback();
      await tick();
      answer();
      await rolling;
      await expect(query).rejects.toThrow(/has ended/);
      expect(fake.ran).toEqual(['BEGIN', 'ROLLBACK']);
      expect(fake.released).toEqual([undefined]);
      expect(rejections).toEqual([]);
    });

    test("an 'error' while the mark and COMMIT are on their way, abandoned meanwhile: not delivered, nothing leaks", async () => {
      const { fake, tx, answer } = await gatedOn('UPDATE x');
      await (tx.db as Db).query('INSERT 1');
      const committing = tx.commit();
      committing.catch(() => {});
      await tick();
      for (const listener of fake.listeners) listener(new Error('terminating connection'));
      await tx.rollback(Promise.resolve());
      answer();
      await expect(committing).rejects.toThrow();
      expect(fake.ran).not.toContain('COMMIT');
      expect(fake.released).toEqual([true]);
      expect(rejections).toEqual([]);
    });
  });
});
