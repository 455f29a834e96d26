import { EventEmitter } from 'node:events';
import { DeliveryError, IpnKitError, StoreError } from '../../../lib/shared/errors.js';
import { postgresMigrations } from '../../../lib/postgres.js';
import { PostgresStore, type PgQueryResult } from '../../../lib/stores/postgres/postgres-store.js';
import { openTransaction } from '../../../lib/stores/postgres/postgres-transaction.js';
import { RedisStore } from '../../../lib/stores/redis/redis-store.js';
import { MemoryStore } from '../../../lib/stores/memory/memory-store.js';
import { createBatcher } from '../../../lib/stores/batcher.js';

// Every way a store fails reaches its caller (the router, the admin page, the CLI, your own code) as an
// IpnKitError with a stable code, the driver's own error kept as `cause`: "every error is an IpnKitError".

/** What a driver rejects with: an Error with the driver's own code. */
function driverError(message: string, code: string): Error {
  return Object.assign(new Error(message), { code });
}

/** Asserts `error` is a StoreError (code IPN_STORE_FAILED) whose message matches and whose cause is `cause`. */
function expectStoreError(error: unknown, message: RegExp, cause?: unknown): void {
  expect(error).toBeInstanceOf(IpnKitError);
  expect(error).toBeInstanceOf(StoreError);
  expect((error as StoreError).code).toBe('IPN_STORE_FAILED');
  expect((error as StoreError).message).toMatch(message);
  if (cause !== undefined) expect((error as StoreError).cause).toBe(cause);
}

async function rejectionOf(pending: Promise<unknown>): Promise<unknown> {
  return pending.then(
    () => {
      throw new Error('expected a rejection');
    },
    (error: unknown) => error,
  );
}

describe('PostgresStore', () => {
  const failing = (error: unknown) => ({
    // Drivers may reject with anything (a string included): the store must cope.
    // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
    query: () => Promise.reject(error),
  });

  test("a sessionSettings other than 'restore' or 'reset' is refused by name", () => {
    const pool = failing('unused');
    for (const given of ['keep', 1, true]) {
      expect(() => new PostgresStore({ pool, sessionSettings: given as never })).toThrow(
        /sessionSettings must be 'restore' or 'reset', got/,
      );
    }
    expect(() => new PostgresStore({ pool, sessionSettings: 'reset' })).not.toThrow();
  });

  test('a query that fails is a StoreError carrying the driver error (and its code) as cause', async () => {
    const lost = driverError('terminating connection due to administrator command', '57P01');
    const store = new PostgresStore({ pool: failing(lost) });
    const error = await rejectionOf(store.list());
    expectStoreError(error, /PostgresStore: a query on ipn_inbox failed: terminating connection/, lost);
    expect(Reflect.get(Object((error as StoreError).cause), 'code')).toBe('57P01');
  });

  test('a missing table is a StoreError that says to run store.migrate(), marked notMigrated', async () => {
    const missing = driverError('relation "ipn_inbox" does not exist', '42P01');
    const store = new PostgresStore({ pool: failing(missing) });
    const error = await rejectionOf(store.lease({ id: 'lease-1', ms: 1000 }, 5));
    expectStoreError(error, /the table ipn_inbox does not exist: run `await store\.migrate\(\)`/, missing);
    expect((error as StoreError).notMigrated).toBe(true);
  });

  test('any other failure is not marked notMigrated: the router reports it as an outage', async () => {
    const store = new PostgresStore({ pool: failing(driverError('connection refused', '08001')) });
    const error = await rejectionOf(store.lease({ id: 'lease-1', ms: 1000 }, 5));
    expect((error as StoreError).notMigrated).toBe(false);
  });

  test('a migrate() that fails is a StoreError naming the table and what the role needs', async () => {
    const denied = driverError('permission denied for schema public', '42501');
    const store = new PostgresStore({ pool: failing(denied), table: 'shop_inbox' });
    expectStoreError(
      await rejectionOf(store.migrate()),
      /migrate: could not create the table shop_inbox: permission denied.*CREATE on the schema/,
      denied,
    );
  });

  test('a non-Error the driver rejects with is a StoreError too', async () => {
    const store = new PostgresStore({ pool: failing('socket hang up') });
    expectStoreError(
      await rejectionOf(store.get('TX.1:SUCCESSFUL')),
      /failed: socket hang up/,
      'socket hang up',
    );
  });

  /**
   * A pool whose table exists once the second statement of a migrate() has answered: before, a query on it
   * fails with 42P01. The first migrate's first statement answers only when `finishMigration()` is called.
   */
  function migratingPool(options: { tableExists: boolean }) {
    const order: string[] = [];
    let exists = options.tableExists;
    let finishMigration: () => void = () => {};
    const pool = {
      query: (text: string) => {
        // migrate() first reads the schema version: none recorded (its table is not there either).
        // (Only that read starts so: version 5's DO block names to_regclass too.)
        if (text.startsWith('SELECT to_regclass'))
          return Promise.resolve({ rows: [{ present: false }], rowCount: 1 });
        const created = text.includes('CREATE TABLE');
        order.push(created ? 'migrate' : 'query');
        if (created && order.filter((entry) => entry === 'migrate').length === 1) {
          return new Promise<PgQueryResult>((resolve) => {
            finishMigration = () => resolve({ rows: [], rowCount: 0 });
          });
        }
        if (created && text.includes('_expected')) exists = true;
        if (!created && !exists) {
          return Promise.reject(driverError('relation "ipn_inbox" does not exist', '42P01'));
        }
        return Promise.resolve<PgQueryResult>({ rows: [], rowCount: 0 });
      },
    };
    return { pool, order, finish: () => finishMigration() };
  }

  test('a query that finds its table missing while a migrate() runs waits for it, then runs again', async () => {
    const { pool, order, finish } = migratingPool({ tableExists: false });
    const store = new PostgresStore({ pool });
    const migrated = store.migrate();
    const listed = store.list();
    await new Promise((resolve) => setImmediate(resolve));
    expect([...order].sort()).toEqual(['migrate', 'query']); // sent, refused (42P01), waiting for the migrate
    finish();
    await migrated;
    await expect(listed).resolves.toEqual([]);
    // The migrate's other versions, then the query again.
    const rest = postgresMigrations().length - 1;
    expect(order.slice(2)).toEqual([...Array<string>(rest).fill('migrate'), 'query']);
  });

  test('a query on a table that exists is answered while a migrate() is held up (behind another instance lock)', async () => {
    // migrate() runs on every start, from every instance: its CREATE INDEX IF NOT EXISTS waits for the
    // writes of the moment, and a connection the network dropped never answers. The store's queries on a
    // table that exists must not wait for it.
    const { pool, order } = migratingPool({ tableExists: true });
    const store = new PostgresStore({ pool });
    const migrated = store.migrate();
    migrated.catch(() => {});
    await expect(store.get('TX.1:SUCCESSFUL')).resolves.toBeUndefined();
    await expect(store.lease({ id: 'lease-1', ms: 1000 }, 5)).resolves.toEqual([]);
    expect([...order].sort()).toEqual(['migrate', 'query', 'query']); // the migrate still has not answered
  });

  test('a query that found its table missing just as a migrate() came and went runs again', async () => {
    let answer: (result: PgQueryResult) => void = () => {};
    let refuse: (error: unknown) => void = () => {};
    let sent = 0;
    const pool = {
      query: (text: string) => {
        // (Only that read starts so: version 5's DO block names to_regclass too.)
        if (text.startsWith('SELECT to_regclass'))
          return Promise.resolve({ rows: [{ present: false }], rowCount: 1 });
        if (text.includes('CREATE TABLE')) return Promise.resolve<PgQueryResult>({ rows: [], rowCount: 0 });
        sent += 1;
        if (sent > 1) return Promise.resolve<PgQueryResult>({ rows: [], rowCount: 0 });
        return new Promise<PgQueryResult>((resolve, reject) => {
          answer = resolve;
          refuse = reject;
        });
      },
    };
    const store = new PostgresStore({ pool });
    const listed = store.list(); // sent before the table exists
    await store.migrate(); // the table is made meanwhile, and the migrate is done
    refuse(driverError('relation "ipn_inbox" does not exist', '42P01')); // the list was planned before it
    void answer;
    await expect(listed).resolves.toEqual([]);
    expect(sent).toBe(2);
  });

  test('a missing table with no migrate() in flight fails at once, with no second try', async () => {
    const { pool, order } = migratingPool({ tableExists: false });
    const store = new PostgresStore({ pool });
    await expect(store.list()).rejects.toThrow(
      /the table ipn_inbox does not exist: run `await store\.migrate\(\)`/,
    );
    expect(order).toEqual(['query']);
  });

  test('a missing expectations table names <table>_expected and postgresExpectationsSql(), not the inbox', async () => {
    // A team that made the inbox with postgresSchemaSql() in its own migrations and forgot the other table:
    // ipn.expect() must not say that the inbox, which works, is missing.
    const missing = driverError('relation "shop_inbox_expected" does not exist', '42P01');
    const store = new PostgresStore({ pool: failing(missing), table: 'shop_inbox' });
    const error = await rejectionOf(
      Promise.resolve(
        store.expectations.put({ transactionId: 'TX.1', amount: 100, expectedAt: 0, dueAt: 0, attempts: 0 }),
      ),
    );
    expectStoreError(error, /the table shop_inbox_expected \(of ipn\.expect\(\)\) does not exist/, missing);
    expect((error as StoreError).message).toMatch(/postgresExpectationsSql\(\)/);
    expect((error as StoreError).message).toMatch(/relation "shop_inbox_expected" does not exist/);
    expect((error as StoreError).message).not.toMatch(/the table shop_inbox does not exist/);
  });
});

describe('a delivery transaction (a listener db.query)', () => {
  const mark = { statement: ['UPDATE', []] as [string, unknown[]], andCommit: () => undefined };
  const markWithout = () => Promise.resolve(true);

  test('a query once the attempt has ended is refused with a DeliveryError', async () => {
    const pool = { connect: () => Promise.reject(new Error('not reached')) };
    const tx = await openTransaction(pool, 'TX.1:SUCCESSFUL', mark, markWithout);
    await tx.rollback();
    const db = tx.db as { query(text: string): Promise<unknown> };
    const error = await rejectionOf(db.query('INSERT INTO ledger VALUES (1)'));
    expect(error).toBeInstanceOf(DeliveryError);
    expect((error as DeliveryError).code).toBe('IPN_DELIVERY_FAILED');
    expect((error as DeliveryError).message).toMatch(/delivery transaction of TX\.1:SUCCESSFUL has ended/);
  });

  test('a pool that cannot hand out a client: the query rejects with a StoreError whose cause is the pool error', async () => {
    const exhausted = new Error('timeout exceeded when trying to connect');
    const pool = { connect: () => Promise.reject(exhausted) };
    const tx = await openTransaction(pool, 'TX.2:SUCCESSFUL', mark, markWithout);
    const db = tx.db as { query(text: string): Promise<unknown> };
    const error = await rejectionOf(db.query('SELECT 1'));
    expectStoreError(
      error,
      /could not open the delivery transaction of TX\.2:SUCCESSFUL: timeout exceeded/,
      exhausted,
    );
    await tx.rollback();
  });

  test('a connection that failed meanwhile fails the commit with a StoreError, even when it emitted a non-Error', async () => {
    const client = Object.assign(new EventEmitter(), {
      query: () => Promise.resolve({ rowCount: 1 }),
      release: () => {},
    });
    const pool = { connect: () => Promise.resolve(client) };
    const tx = await openTransaction(pool, 'TX.3:SUCCESSFUL', mark, markWithout);
    const db = tx.db as { query(text: string): Promise<unknown> };
    await db.query('INSERT INTO ledger VALUES (1)');
    client.emit('error', 'Connection terminated unexpectedly');
    expectStoreError(
      await rejectionOf(tx.commit()),
      /connection of the delivery transaction of TX\.3:SUCCESSFUL failed: Connection terminated/,
      'Connection terminated unexpectedly',
    );
  });
});

describe('RedisStore', () => {
  test('a command the client rejects is a StoreError carrying the client error', async () => {
    const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6379'), { code: 'ECONNREFUSED' });
    const store = new RedisStore({ client: { call: () => Promise.reject(refused) } });
    expectStoreError(
      await rejectionOf(store.get('TX.1:SUCCESSFUL')),
      /HGETALL command failed: connect ECONNREFUSED/,
      refused,
    );
    expectStoreError(
      await rejectionOf(store.claim('TX.1:SUCCESSFUL', 1000)),
      /EVALSHA command failed/,
      refused,
    );
  });

  test('NOSCRIPT still falls back to EVAL (the StoreError wrapping does not hide it)', async () => {
    const sent: string[] = [];
    const client = {
      call: (command: string) => {
        sent.push(command);
        return command === 'EVALSHA'
          ? Promise.reject(new Error('NOSCRIPT No matching script'))
          : Promise.resolve(1);
      },
    };
    await expect(new RedisStore({ client }).claim('TX.1:SUCCESSFUL', 1000)).resolves.toBe(true);
    expect(sent).toEqual(['EVALSHA', 'EVAL']);
  });

  test('an unexpected reply to the claim script is a StoreError', async () => {
    const store = new RedisStore({ client: { call: () => Promise.resolve('OK') } });
    expectStoreError(
      await rejectionOf(store.claim('TX.1:SUCCESSFUL', 1000)),
      /unexpected reply to the claim script: "OK"/,
    );
  });

  test('a node-redis client that is not connected is a StoreError saying to connect it', async () => {
    const client = { isOpen: false, sendCommand: () => Promise.resolve(1) };
    const store = new RedisStore({ client });
    expectStoreError(
      await rejectionOf(store.claim('TX.1:SUCCESSFUL', 1000)),
      /not connected: call `await client\.connect\(\)`/,
    );
  });
});

describe('the group commit batcher', () => {
  test('a batch that resolves the wrong number of results rejects each call with a StoreError', async () => {
    const call = createBatcher((items: number[]) => Promise.resolve(items.slice(1)));
    expectStoreError(await rejectionOf(call(1)), /a batch of 1 writes resolved 0 results/);
  });
});

describe('MemoryStore', () => {
  test('a record it cannot keep (structuredClone refuses a function) is a StoreError carrying why', async () => {
    const store = new MemoryStore();
    const record = { transaction_id: 'TX.1', state: 'SUCCESSFUL', hook: () => {} };
    const error = await rejectionOf(store.receive('TX.1:SUCCESSFUL', record, { id: 'lease-1', ms: 1000 }));
    expectStoreError(error, /MemoryStore: .*could not be cloned/);
    expect((error as StoreError).cause).toMatchObject({ name: 'DataCloneError' });
  });

  test('a record too deep to copy (the engine stack overflows, a RangeError) is a StoreError too, not a mistake', async () => {
    const store = new MemoryStore();
    const record: Record<string, unknown> = { transaction_id: 'TX.2', state: 'SUCCESSFUL' };
    let level = record;
    for (let depth = 0; depth < 200_000; depth += 1) {
      const inner: Record<string, unknown> = {};
      level.nested = inner;
      level = inner;
    }
    const error = await rejectionOf(store.receive('TX.2:SUCCESSFUL', record, { id: 'lease-1', ms: 1000 }));
    expectStoreError(error, /MemoryStore: Maximum call stack size exceeded/);
    expect((error as StoreError).cause).toMatchObject({ name: 'RangeError' });
    // The same RangeError from this realm (under jest, the engine's comes from another, which instanceof
    // does not see): a value of the record that cannot be read is the store failing too.
    const unreadable = {
      transaction_id: 'TX.3',
      state: 'SUCCESSFUL',
      get paid_at(): string {
        return new Date(Number.NaN).toISOString(); // RangeError: Invalid time value
      },
    };
    const again = await rejectionOf(
      store.receive('TX.3:SUCCESSFUL', unreadable, { id: 'lease-2', ms: 1000 }),
    );
    expectStoreError(again, /MemoryStore: Invalid time value/);
    expect((again as StoreError).cause).toBeInstanceOf(RangeError);
  });
});
