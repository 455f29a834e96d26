import { randomUUID } from 'node:crypto';
import { Client, Pool, type PoolClient } from 'pg';
import { openTransaction, type DeliveredMark } from '../../../lib/stores/postgres/postgres-transaction.js';
import { LEASE_LOST } from '../../../lib/stores/postgres/postgres-sql.js';
import { databaseUrl, describeWithService } from '../../helpers/services.js';

/** Hostile review of the pool seam (pool-transaction.ts) through PostgreSQL's raw pool path. */
describeWithService('PostgreSQL', 'pool seam (review)', () => {
  const suffix = `${process.pid}_${randomUUID().slice(0, 8)}`;
  const inbox = `seamreview_inbox_${suffix}`;
  const ledger = `seamreview_ledger_${suffix}`;
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

  function watchedPool(from: () => Pool = () => pool) {
    const released: Array<boolean | Error | undefined> = [];
    const watched = {
      Client,
      connect: async (): Promise<PoolClient> => {
        const client = await from().connect();
        const release = client.release.bind(client);
        client.release = (destroy?: boolean | Error) => {
          released.push(destroy);
          release(destroy);
        };
        return client;
      },
    };
    return { watched, released };
  }

  async function entry(leaseId = randomUUID(), combined = false) {
    const key = `EFB.${randomUUID()}:SUCCESSFUL`;
    await pool.query(`INSERT INTO ${inbox} VALUES ($1, $2, 'received')`, [key, leaseId]);
    const update = `UPDATE ${inbox} SET status = 'delivered', lease_id = NULL WHERE key = $1 AND lease_id = $2`;
    const mark: DeliveredMark = {
      statement: [update, [key, leaseId]],
      andCommit: (reset) =>
        combined
          ? `${reset ? 'RESET ALL; ' : ''}DO $ipn_kit$ BEGIN
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
  const settled = <T>(promise: Promise<T>, ms = 500): Promise<'settled' | 'pending'> =>
    Promise.race([
      promise.then(
        () => 'settled' as const,
        () => 'settled' as const,
      ),
      new Promise<'pending'>((resolve) => setTimeout(() => resolve('pending'), ms)),
    ]);

  test('rollback() of an attempt whose first query still waits for a client does not wait for the pool', async () => {
    // The old code returned at once (no client held yet); a pool that is exhausted, or whose connect()
    // hangs (an unreachable database, no connectionTimeoutMillis), must not hang the attempt's rollback.
    let handOut: (() => void) | undefined;
    const { watched, released } = watchedPool();
    const slow = {
      connect: () => new Promise<PoolClient>((resolve) => (handOut = () => resolve(watched.connect()))),
    };
    const { key, mark } = await entry();
    const tx = await openTransaction(slow, key, mark, () => Promise.reject(new Error('not used')));
    const query = (tx.db as Db).query(`INSERT INTO ${ledger} VALUES ($1, 'credited')`, [key]);
    query.catch(() => {});
    const rolling = tx.rollback();
    const outcome = await settled(rolling);
    handOut!();
    await expect(query).rejects.toThrow(/has ended/);
    await rolling;
    expect(outcome).toBe('settled');
    expect(released).toEqual([undefined]);
    expect(await notesOf(key)).toEqual([]);
  });

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
  ])(
    'a session setting made through db (%s) does not outlive the delivery on the pooled client',
    async (_what, text) => {
      const single = new Pool({ connectionString: databaseUrl(), max: 1 });
      try {
        const before = (
          await single.query<{ s: string; t: string }>(
            "SELECT current_setting('search_path') AS s, current_setting('statement_timeout') AS t",
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
            await single.query<{ s: string; t: string }>(
              "SELECT current_setting('search_path') AS s, current_setting('statement_timeout') AS t",
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
      const parent = `seamreview_parent_${suffix}`;
      const child = `seamreview_child_${suffix}`;
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
    function fakeClient(gates: Map<string, Promise<void>> = new Map()) {
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
      let answer!: () => void;
      const fake = fakeClient(new Map([['BEGIN', new Promise<void>((resolve) => (answer = resolve))]]));
      const tx = await openTransaction({ connect: () => Promise.resolve(fake.client) }, 'K', mark, () =>
        Promise.resolve(true),
      );
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
      let answer!: () => void;
      const fake = fakeClient(new Map([['BEGIN', new Promise<void>((resolve) => (answer = resolve))]]));
      const tx = await openTransaction({ connect: () => Promise.resolve(fake.client) }, 'K', mark, () =>
        Promise.resolve(true),
      );
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
      let answer!: () => void;
      const fake = fakeClient(new Map([['UPDATE x', new Promise<void>((resolve) => (answer = resolve))]]));
      const tx = await openTransaction({ connect: () => Promise.resolve(fake.client) }, 'K', mark, () =>
        Promise.resolve(true),
      );
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
