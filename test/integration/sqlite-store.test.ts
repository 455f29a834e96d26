import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { ipnRouter, StoreError } from 'ipn-kit';
import { SqliteStore, sqliteSchemaSql } from 'ipn-kit/sqlite';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { servedRouters } from '../helpers/servers.js';
import { eventually } from '../helpers/services.js';

jest.setTimeout(30_000);

const folder = mkdtempSync(join(tmpdir(), 'ipn-sqlite-'));
const opened: Database.Database[] = [];
afterAll(() => {
  for (const database of opened) if (database.open) database.close();
  rmSync(folder, { recursive: true, force: true });
});

/** A new file of this run, and a connection to it. */
function newFile(): string {
  return join(folder, `${randomUUID().slice(0, 8)}.db`);
}
function open(path: string): Database.Database {
  const database = new Database(path);
  opened.push(database);
  return database;
}
/** A migrated store on a new file, with a `ledger` table (no unique key) in the same file. */
async function newStore(): Promise<{ store: SqliteStore<Database.Database>; database: Database.Database }> {
  const database = open(newFile());
  const store = new SqliteStore({ database });
  await store.migrate();
  database.exec('CREATE TABLE ledger (transaction_id TEXT NOT NULL, amount REAL)');
  return { store, database };
}
const lease = () => ({ id: randomUUID(), ms: 60_000 });
const keyOf = (payload: Record<string, unknown>) => `${String(payload.transaction_id)}:SUCCESSFUL`;
const ledgerRows = (database: Database.Database, id: unknown) =>
  (database.prepare('SELECT count(*) AS n FROM ledger WHERE transaction_id = ?').get(id) as { n: number }).n;

describe('SqliteStore', () => {
  test("puts the file in WAL mode and sets SQLite's busy timeout to 0 (the store waits for another process's lock on timers, not inside SQLite)", () => {
    const database = open(newFile());
    new SqliteStore({ database, busyTimeoutMs: 1234 });
    expect(database.pragma('journal_mode', { simple: true })).toBe('wal');
    expect(database.pragma('busy_timeout', { simple: true })).toBe(0);
  });

  test('migrate() is idempotent, from two connections to one file too', async () => {
    const path = newFile();
    const [one, two] = [new SqliteStore({ database: open(path) }), new SqliteStore({ database: open(path) })];
    await Promise.all([one.migrate(), two.migrate(), one.migrate()]);
    expect(await one.receive('t1:SUCCESSFUL', { transaction_id: 't1' }, lease())).toBe(true);
    expect((await two.get('t1:SUCCESSFUL'))?.record).toEqual({ transaction_id: 't1' });
    await one.expectations.put({ transactionId: 't1', expectedAt: 1, dueAt: 2, attempts: 0 });
    expect(await two.expectations.get('t1')).toEqual({
      transactionId: 't1',
      expectedAt: 1,
      dueAt: 2,
      attempts: 0,
    });
  });

  test('sqliteSchemaSql() is the SQL migrate() runs, for your own migrations', async () => {
    const database = open(newFile());
    database.exec(sqliteSchemaSql('my_inbox'));
    const store = new SqliteStore({ database, table: 'my_inbox' });
    expect(await store.claim('t1:SUCCESSFUL', 1000, 'token')).toBe(true);
    expect(() => sqliteSchemaSql('bad name')).toThrow(TypeError);
  });

  test('a missing table is a StoreError that says to migrate, with notMigrated', async () => {
    const store = new SqliteStore({ database: open(newFile()) });
    const error = await store.claim('t1:SUCCESSFUL', 1000, 'token').catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(StoreError);
    expect(error).toMatchObject({ notMigrated: true });
    expect((error as Error).message).toMatch(
      /the table ipn_inbox_claims does not exist: run `await store.migrate\(\)`/,
    );
    const expected = await store.expectations.get('t1').catch((caught: unknown) => caught);
    expect(expected).toMatchObject({ notMigrated: true });
    expect((expected as Error).message).toMatch(/ipn_inbox_expected does not exist/);
  });

  test('release(key) of a claim never deletes an entry an instance at least once received as the claim went', async () => {
    const { store, database } = await newStore();
    const other = new SqliteStore({ database });
    const key = 'TX.release-race:SUCCESSFUL';
    expect(await store.claim(key, 60_000, randomUUID())).toBe(true);

    // At most once, a claim undone (answered 503); the resend reaches an instance at least once meanwhile.
    const releasing = store.release(key);
    const received = other.receive(key, { transaction_id: 'TX.release-race', state: 'SUCCESSFUL' }, lease());
    await releasing;

    if (await received) expect(await other.get(key)).toMatchObject({ status: 'received' });
    // Whatever it answered, the key is free once the release is done.
    expect(
      await other.receive(key, { transaction_id: 'TX.release-race', state: 'SUCCESSFUL' }, lease()),
    ).toBe(!(await received));
  });

  test('release(key) deletes the claim even when deleting its inbox entry fails: the resend after a 503 is processed', async () => {
    const { store, database } = await newStore();
    const key = 'TX.release-fails:SUCCESSFUL';
    expect(await store.claim(key, 60_000, randomUUID())).toBe(true);
    database.exec('ALTER TABLE ipn_inbox RENAME TO ipn_inbox_gone'); // the entry's delete fails

    await expect(store.release(key)).rejects.toThrow(StoreError);

    database.exec('ALTER TABLE ipn_inbox_gone RENAME TO ipn_inbox');
    expect(await store.claim(key, 60_000, randomUUID())).toBe(true);
  });

  test('clear TypeErrors for a wrong argument', () => {
    expect(() => new SqliteStore({ database: 'ipn.db' as never })).toThrow(
      /database must be an open better-sqlite3 Database \(new Database\('ipn.db'\)\)/,
    );
    const database = open(newFile());
    expect(() => new SqliteStore({ database, table: 'a-b' })).toThrow(/table must be a name/);
    expect(() => new SqliteStore({ database, busyTimeoutMs: -1 })).toThrow(/busyTimeoutMs/);
    expect(() => new SqliteStore({ database, connect: 'x' as never })).toThrow(/connect must be a function/);
  });

  test('an in-memory database works as a store, without delivery transactions (no second connection reaches it)', async () => {
    const database = open(':memory:');
    const store = new SqliteStore({ database });
    await store.migrate();
    const held = lease();
    expect(await store.receive('t1:SUCCESSFUL', { transaction_id: 't1' }, held)).toBe(true);
    expect(await store.begin('t1:SUCCESSFUL', held.id)).toBeUndefined();
  });

  test("a driver of node:sqlite's shape (prepare, exec, close; no path to reopen) works given connect", async () => {
    // node:sqlite's DatabaseSync (Node 22.5+) has this shape; Node 20 has none, so a wrapper stands in.
    const path = newFile();
    const shaped = (database: Database.Database) => ({
      prepare: (sql: string) => database.prepare(sql),
      exec: (sql: string) => database.exec(sql),
      close: () => database.close(),
    });
    const store = new SqliteStore({ database: shaped(open(path)), connect: () => shaped(open(path)) });
    await store.migrate();
    open(path).exec('CREATE TABLE ledger (transaction_id TEXT NOT NULL, amount REAL)');
    const held = lease();
    await store.receive('t1:SUCCESSFUL', { transaction_id: 't1' }, held);
    const tx = (await store.begin('t1:SUCCESSFUL', held.id))!;
    tx.tx.prepare('INSERT INTO ledger VALUES (?, ?)').run('t1', 5);
    expect(await tx.commit()).toBe('delivered');
    expect(ledgerRows(open(path), 't1')).toBe(1);
    const without = new SqliteStore({ database: shaped(open(path)) });
    expect(await without.begin('t1:SUCCESSFUL', held.id)).toBeUndefined(); // no path to open a second one
  });

  test("a delivery transaction: the listeners' writes and the mark commit together; a rollback undoes both", async () => {
    const { store, database } = await newStore();
    const held = lease();
    await store.receive('t1:SUCCESSFUL', { transaction_id: 't1' }, held);
    const tx = (await store.begin('t1:SUCCESSFUL', held.id))!;
    expect(tx.db).toBe(tx.tx);
    expect(tx.tx).toBeInstanceOf(Database); // the user's own driver type, a second connection
    expect(tx.tx).not.toBe(database);
    tx.tx.prepare('INSERT INTO ledger VALUES (?, ?)').run('t1', 5);
    expect(ledgerRows(database, 't1')).toBe(0); // not committed yet: the store's connection does not see it
    expect(await tx.commit()).toBe('delivered');
    expect(ledgerRows(database, 't1')).toBe(1);
    expect((await store.get('t1:SUCCESSFUL'))?.status).toBe('delivered');

    const other = lease();
    await store.receive('t2:SUCCESSFUL', { transaction_id: 't2' }, other);
    const rolled = (await store.begin('t2:SUCCESSFUL', other.id))!;
    rolled.tx.prepare('INSERT INTO ledger VALUES (?, ?)').run('t2', 5);
    await rolled.rollback();
    expect(rolled.state).toBe('ended');
    expect(ledgerRows(database, 't2')).toBe(0);
    expect((await store.get('t2:SUCCESSFUL'))?.status).toBe('received');
  });

  test('a lost lease rolls the listeners\' writes back: commit() resolves "lost"', async () => {
    const { store, database } = await newStore();
    const held = lease();
    await store.receive('t1:SUCCESSFUL', { transaction_id: 't1' }, held);
    await store.settle('t1:SUCCESSFUL', held.id, { status: 'failed', error: 'x', nextAttemptAt: new Date() });
    const tx = (await store.begin('t1:SUCCESSFUL', held.id))!;
    tx.tx.prepare('INSERT INTO ledger VALUES (?, ?)').run('t1', 5);
    expect(await tx.commit()).toBe('lost');
    expect(ledgerRows(database, 't1')).toBe(0);
  });

  test("the store's writes wait for an open delivery transaction instead of failing on the file's lock", async () => {
    const { store, database } = await newStore();
    const held = lease();
    await store.receive('t1:SUCCESSFUL', { transaction_id: 't1' }, held);
    const tx = (await store.begin('t1:SUCCESSFUL', held.id))!;
    tx.tx.prepare('INSERT INTO ledger VALUES (?, ?)').run('t1', 5);
    let received: boolean | undefined;
    const receiving = store.receive('t2:SUCCESSFUL', { transaction_id: 't2' }, lease()).then((answer) => {
      received = answer;
    });
    await new Promise((resolve) => setImmediate(resolve));
    expect(received).toBeUndefined(); // waiting for its turn, not blocked inside SQLite
    expect(await store.get('t1:SUCCESSFUL')).toMatchObject({ status: 'received' }); // reads go on
    expect(await tx.commit()).toBe('delivered');
    await receiving;
    expect(received).toBe(true);
    expect(ledgerRows(database, 't1')).toBe(1);
  });

  test('an abandoned attempt (its listeners still running) lets go at once; their late write lands nowhere', async () => {
    const { store, database } = await newStore();
    const held = lease();
    await store.receive('t1:SUCCESSFUL', { transaction_id: 't1' }, held);
    const tx = (await store.begin('t1:SUCCESSFUL', held.id))!;
    tx.tx.prepare('INSERT INTO ledger VALUES (?, ?)').run('t1', 5);
    let finish!: () => void;
    const listeners = new Promise<void>((resolve) => (finish = resolve));
    await tx.rollback(listeners);
    // The store's writes go on while the abandoned listeners still run.
    expect(await store.receive('t2:SUCCESSFUL', { transaction_id: 't2' }, lease())).toBe(true);
    expect(() => tx.tx.prepare('INSERT INTO ledger VALUES (?, ?)').run('t1', 6)).toThrow(
      /the delivery transaction of t1:SUCCESSFUL has ended/,
    );
    finish();
    expect(ledgerRows(database, 't1')).toBe(0);
    // The next attempt opens a new connection.
    const next = lease();
    await store.receive('t3:SUCCESSFUL', { transaction_id: 't3' }, next);
    const again = (await store.begin('t3:SUCCESSFUL', next.id))!;
    again.tx.prepare('INSERT INTO ledger VALUES (?, ?)').run('t3', 5);
    expect(await again.commit()).toBe('delivered');
    expect(ledgerRows(database, 't3')).toBe(1);
    await store.close();
  });

  test('a nested db.transaction() of better-sqlite3 inside the listener is a savepoint of the delivery transaction', async () => {
    const { store, database } = await newStore();
    const held = lease();
    await store.receive('t1:SUCCESSFUL', { transaction_id: 't1' }, held);
    const tx = (await store.begin('t1:SUCCESSFUL', held.id))!;
    tx.tx.transaction(() => tx.tx.prepare('INSERT INTO ledger VALUES (?, ?)').run('t1', 5))();
    expect(() =>
      tx.tx.transaction(() => {
        tx.tx.prepare('INSERT INTO ledger VALUES (?, ?)').run('t1', 6);
        throw new Error('undone');
      })(),
    ).toThrow('undone');
    expect(await tx.commit()).toBe('delivered');
    expect(database.prepare('SELECT amount FROM ledger').all()).toEqual([{ amount: 5 }]);
  });
});

describe("exactly once on a ledger in the same file: SqliteStore, delivery: 'at-least-once'", () => {
  const serve = servedRouters();
  const router = (store: SqliteStore<Database.Database>) =>
    ipnRouter({ store, delivery: 'at-least-once', logger: quiet, retryDelayMs: 20, recoveryIntervalMs: 50 });
  const delivered = (store: SqliteStore, key: string) =>
    eventually(`${key} delivered`, async () => (await store.get(key))?.status === 'delivered');

  test('a notification posted twice (and twice at once) writes one ledger row', async () => {
    const { store, database } = await newStore();
    const { ipn, post } = await serve(router(store));
    ipn.on('successful', (n, { db }) => {
      db.prepare('INSERT INTO ledger (transaction_id, amount) VALUES (?, ?)').run(n.transaction_id, n.amount);
    });
    const payloads = [uniquePayload(), uniquePayload(), uniquePayload()];
    const answers = await Promise.all([...payloads, ...payloads].map((payload) => post(payload)));
    expect(answers.map((answer) => answer.status)).toEqual(answers.map(() => 200));
    for (const payload of payloads) await delivered(store, keyOf(payload));
    expect(await (await post(payloads[0]!)).json()).toEqual({ ok: true, duplicate: true });
    for (const payload of payloads) expect(ledgerRows(database, payload.transaction_id)).toBe(1);
  });

  test('a listener that writes its row, then throws on attempt 1, leaves one row after the retry', async () => {
    const { store, database } = await newStore();
    const { ipn, post } = await serve(router(store));
    const attempts: number[] = [];
    ipn.on('successful', (n, { db, attempt }) => {
      attempts.push(attempt);
      db.prepare('INSERT INTO ledger (transaction_id, amount) VALUES (?, ?)').run(n.transaction_id, n.amount);
      if (attempt === 1) throw new Error('the first attempt fails after its write');
    });
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await delivered(store, keyOf(payload));
    expect(attempts).toEqual([1, 2]);
    expect(ledgerRows(database, payload.transaction_id)).toBe(1);
  });

  test("synchronous listeners: the app's own writes on its handle, at every turn of the event loop, never meet a delivery's lock", async () => {
    const { store, database } = await newStore();
    database.exec('CREATE TABLE orders (id INTEGER)');
    const { ipn, post } = await serve(router(store));
    ipn.on('successful', (n, { db }) => {
      db.prepare('INSERT INTO ledger (transaction_id, amount) VALUES (?, ?)').run(n.transaction_id, n.amount);
    });
    // Between the BEGIN and the COMMIT of a delivery with synchronous listeners only promises settle: no
    // other callback of the process (a request of the app's own) runs, so none finds the file locked.
    const errors: unknown[] = [];
    let writing = true;
    const write = () => {
      try {
        database.prepare('INSERT INTO orders VALUES (1)').run();
      } catch (error) {
        errors.push(error);
      }
      if (writing) setImmediate(write);
    };
    write();
    const payloads = Array.from({ length: 20 }, () => uniquePayload());
    await Promise.all(payloads.map((payload) => post(payload)));
    for (const payload of payloads) await delivered(store, keyOf(payload));
    writing = false;
    expect(errors).toEqual([]);
    for (const payload of payloads) expect(ledgerRows(database, payload.transaction_id)).toBe(1);
  });

  test("a listener that awaits holds the file's write lock meanwhile: the app's own write on the handle it gave the store fails at once (its SQLite busy timeout is 0)", async () => {
    const database = open(newFile());
    const store = new SqliteStore({ database, busyTimeoutMs: 50 });
    await store.migrate();
    database.exec('CREATE TABLE ledger (transaction_id TEXT NOT NULL, amount REAL)');
    const held = lease();
    await store.receive('t1:SUCCESSFUL', { transaction_id: 't1' }, held);
    const tx = (await store.begin('t1:SUCCESSFUL', held.id))!;
    // Synchronous: waiting inside SQLite blocks the event loop that would finish the transaction.
    expect(() => database.prepare('INSERT INTO ledger VALUES (?, ?)').run('app', 1)).toThrow(
      /database is locked/,
    );
    expect(await tx.commit()).toBe('delivered');
    database.prepare('INSERT INTO ledger VALUES (?, ?)').run('app', 1);
    expect(ledgerRows(database, 'app')).toBe(1);
  });

  test("concurrent deliveries take turns on the file's write lock and each credits once", async () => {
    const { store, database } = await newStore();
    const { ipn, post } = await serve(router(store));
    ipn.on('successful', async (n, { db }) => {
      db.prepare('INSERT INTO ledger (transaction_id, amount) VALUES (?, ?)').run(n.transaction_id, n.amount);
      await new Promise((resolve) => setImmediate(resolve)); // the transaction stays open across turns
    });
    const payloads = Array.from({ length: 20 }, () => uniquePayload());
    const answers = await Promise.all(payloads.map((payload) => post(payload)));
    expect(answers.map((answer) => answer.status)).toEqual(answers.map(() => 200));
    for (const payload of payloads) await delivered(store, keyOf(payload));
    for (const payload of payloads) expect(ledgerRows(database, payload.transaction_id)).toBe(1);
  });

  // Deno's node:sqlite throws SQLITE_BUSY as { code: 'ERR_SQLITE_ERROR', message: 'database is locked' },
  // with no errcode (test/runtimes/deno-sqlite.test.ts runs the store there): the store retries it too.
  test.each([
    ["Deno's node:sqlite", { code: 'ERR_SQLITE_ERROR' }],
    ["Node's node:sqlite", { code: 'ERR_SQLITE_ERROR', errcode: 5, errstr: 'database is locked' }],
  ])("another process's lock as %s words it is waited for, and a receive goes through", async (_, fields) => {
    const database = open(newFile());
    let busy = 3;
    const driver = {
      exec: (text: string) => database.exec(text),
      close: () => undefined,
      prepare(text: string) {
        const statement = database.prepare(text);
        return {
          all: (...values: unknown[]) => statement.all(...values),
          run(...values: unknown[]) {
            if (/^\s*INSERT/i.test(text) && busy-- > 0) {
              throw Object.assign(new Error('database is locked'), fields);
            }
            return statement.run(...values);
          },
        };
      },
    };
    const store = new SqliteStore({ database: driver });
    await store.migrate();

    expect(await store.receive('t1:SUCCESSFUL', { transaction_id: 't1' }, lease())).toBe(true);
    expect(busy).toBe(-1);
    expect((await store.get('t1:SUCCESSFUL'))?.status).toBe('received');
  });
});
