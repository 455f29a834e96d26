import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { ipnRouter } from 'ipn-kit';
import { SqliteStore } from 'ipn-kit/sqlite';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { servedRouters } from '../helpers/servers.js';
import { eventually } from '../helpers/services.js';

jest.setTimeout(30_000);

/**
 * A hostile review of SqliteStore: listeners that end the delivery's transaction themselves on the
 * connection they are given, another process holding the file's write lock, an abandoned attempt whose
 * connection cannot close.
 */
const folder = mkdtempSync(join(tmpdir(), 'ipn-sqlite-hostile-'));
const opened: Database.Database[] = [];
afterAll(() => {
  for (const database of opened) if (database.open) database.close();
  rmSync(folder, { recursive: true, force: true });
});
function open(path: string): Database.Database {
  const database = new Database(path);
  opened.push(database);
  return database;
}
async function newStore(busyTimeoutMs?: number) {
  const path = join(folder, `${randomUUID().slice(0, 8)}.db`);
  const database = open(path);
  const store = new SqliteStore({ database, busyTimeoutMs });
  await store.migrate();
  database.exec('CREATE TABLE ledger (transaction_id TEXT NOT NULL, amount REAL)');
  return { store, database, path };
}
const keyOf = (payload: Record<string, unknown>) => `${String(payload.transaction_id)}:SUCCESSFUL`;
const ledgerRows = (database: Database.Database, id: unknown) =>
  (database.prepare('SELECT count(*) AS n FROM ledger WHERE transaction_id = ?').get(id) as { n: number }).n;

describe('SqliteStore under hostile listeners', () => {
  const serve = servedRouters();
  const router = (store: SqliteStore<Database.Database>) =>
    ipnRouter({ store, delivery: 'at-least-once', logger: quiet, retryDelayMs: 20, recoveryIntervalMs: 50 });
  const delivered = (store: SqliteStore, key: string) =>
    eventually(`${key} delivered`, async () => (await store.get(key))?.status === 'delivered');

  // The listener's db is the raw connection of the delivery's transaction: a COMMIT sent on it commits the
  // credit at once, the mark then runs on its own, and a failure after it credits the payment again.
  test.each([
    ["db.exec('COMMIT')", (db: Database.Database) => db.exec('COMMIT')],
    ["db.prepare('END').run()", (db: Database.Database) => db.prepare('END').run()],
    ["db.exec('ROLLBACK; BEGIN')", (db: Database.Database) => db.exec('ROLLBACK; BEGIN')],
  ])(
    'a listener that sends %s after its write, then fails its first attempt: one row',
    async (_what, end) => {
      const { store, database } = await newStore();
      const { ipn, post } = await serve(router(store));
      ipn.on('successful', (n, { db, attempt }) => {
        db.prepare('INSERT INTO ledger (transaction_id, amount) VALUES (?, ?)').run(
          n.transaction_id,
          n.amount,
        );
        if (attempt === 1) {
          try {
            end(db);
          } catch {
            // refused or not: the attempt fails after it
          }
          throw new Error('the order service is down');
        }
      });
      const payload = uniquePayload();

      expect((await post(payload)).status).toBe(200);
      await delivered(store, keyOf(payload));

      expect(ledgerRows(database, payload.transaction_id)).toBe(1);
    },
  );

  test('a listener that closes db on its first attempt: the retry (and every later delivery) still delivers, once', async () => {
    const { store, database } = await newStore();
    const { ipn, post } = await serve(router(store));
    ipn.on('successful', (n, { db, attempt }) => {
      db.prepare('INSERT INTO ledger (transaction_id, amount) VALUES (?, ?)').run(n.transaction_id, n.amount);
      if (attempt === 1) db.close();
    });
    const [first, second] = [uniquePayload(), uniquePayload()];

    expect((await post(first)).status).toBe(200);
    await delivered(store, keyOf(first));
    expect((await post(second)).status).toBe(200);
    await delivered(store, keyOf(second));

    expect(ledgerRows(database, first.transaction_id)).toBe(1);
    expect(ledgerRows(database, second.transaction_id)).toBe(1);
  });

  test("a receive that meets another process's write lock past busyTimeoutMs answers 503; the resend is delivered once", async () => {
    const { store, database, path } = await newStore(50);
    const { ipn, post } = await serve(router(store));
    ipn.on('successful', (n, { db }) => {
      db.prepare('INSERT INTO ledger (transaction_id, amount) VALUES (?, ?)').run(n.transaction_id, n.amount);
    });
    const otherProcess = open(path);
    otherProcess.exec('BEGIN IMMEDIATE');
    const payload = uniquePayload();

    expect((await post(payload)).status).toBe(503);
    otherProcess.exec('COMMIT');
    expect((await post(payload)).status).toBe(200);
    await delivered(store, keyOf(payload));

    expect(ledgerRows(database, payload.transaction_id)).toBe(1);
  });

  // Another process's delivery holds the file's write lock while its listener awaits (1 s here): this
  // process's receive once waited for it inside SQLite's busy handler, synchronously, and every timer and
  // request of the process waited with it (measured: a 10 ms timer late by the whole wait). Now the store's
  // connections run with busy_timeout 0 and SQLITE_BUSY is retried on timers up to busyTimeoutMs.
  test("a receive waiting for another process's write lock does not freeze this process's event loop", async () => {
    const { store, path } = await newStore(5_000);
    const holder = spawn(
      process.execPath,
      [
        '-e',
        `const D = require('better-sqlite3'); const d = new D(${JSON.stringify(path)});` +
          "d.exec('BEGIN IMMEDIATE'); process.send('held');" +
          "setTimeout(() => { d.exec('COMMIT'); process.exit(0); }, 1000);",
      ],
      { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
    );
    await new Promise((resolve) => holder.once('message', resolve));
    let last = Date.now();
    let worstGap = 0;
    const timer = setInterval(() => {
      worstGap = Math.max(worstGap, Date.now() - last);
      last = Date.now();
    }, 10);
    await new Promise((resolve) => setTimeout(resolve, 30));
    try {
      expect(await store.receive('t1:SUCCESSFUL', { transaction_id: 't1' }, { id: 'l', ms: 1000 })).toBe(
        true,
      );
      await new Promise((resolve) => setTimeout(resolve, 30));
    } finally {
      clearInterval(timer);
      await new Promise((resolve) => (holder.exitCode === null ? holder.once('exit', resolve) : resolve(0)));
    }
    expect(worstGap).toBeLessThan(500);
  });

  /** Another process that holds the file's write lock until it is sent 'release', then says 'released'. */
  async function lockHolder(path: string) {
    const holder = spawn(
      process.execPath,
      [
        '-e',
        `const D = require('better-sqlite3'); const d = new D(${JSON.stringify(path)});` +
          "d.exec('BEGIN IMMEDIATE'); process.send('held');" +
          "process.on('message', () => { d.exec('COMMIT'); process.send('released', () => process.exit(0)); });",
      ],
      { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
    );
    await new Promise((resolve) => holder.once('message', resolve));
    return {
      // Sent from the next turn of this process's event loop, after the store's statement (run in the
      // microtasks before it) has met the lock: a loop frozen inside SQLite's busy handler would send it
      // only once the store's wait has failed.
      release: () =>
        new Promise((resolve) => {
          holder.once('message', resolve);
          setImmediate(() => holder.send('release'));
        }),
      exited: () =>
        new Promise((resolve) => (holder.exitCode === null ? holder.once('exit', resolve) : resolve(0))),
    };
  }

  test("a delivery transaction whose BEGIN meets another process's write lock waits for it on timers, then commits once", async () => {
    const { store, database, path } = await newStore(10_000);
    const held = { id: randomUUID(), ms: 60_000 };
    await store.receive('t1:SUCCESSFUL', { transaction_id: 't1' }, held);
    const holder = await lockHolder(path);
    try {
      const opening = store.begin('t1:SUCCESSFUL', held.id);
      await holder.release();
      const tx = (await opening)!;
      tx.tx.prepare('INSERT INTO ledger VALUES (?, ?)').run('t1', 5);
      expect(await tx.commit()).toBe('delivered');
    } finally {
      await holder.exited();
    }
    expect(ledgerRows(database, 't1')).toBe(1);
    expect((await store.get('t1:SUCCESSFUL'))?.status).toBe('delivered');
  });

  test("a receive and migrate wait for another process's write lock on timers, and go through once it goes", async () => {
    const { store, path } = await newStore(10_000);
    const lease = { id: randomUUID(), ms: 60_000 };
    const holder = await lockHolder(path);
    try {
      const received = store.receive('t1:SUCCESSFUL', { transaction_id: 't1' }, lease);
      const migrated = store.migrate();
      await holder.release();
      expect(await received).toBe(true);
      await migrated;
    } finally {
      await holder.exited();
    }
    expect(await store.settle('t1:SUCCESSFUL', lease.id, { status: 'delivered' })).toBe(true);
  });

  // A listener reading rows one at a time, awaiting between them (an HTTP call per row), is abandoned: its
  // connection cannot close while the iterator is open. Once a failed ROLLBACK went unnoticed there, and the
  // store's next write met the attempt's lock: "database is locked" after busyTimeoutMs of a frozen loop.
  async function abandonedWithIterator(store: SqliteStore<Database.Database>) {
    const held = { id: randomUUID(), ms: 60_000 };
    await store.receive('t1:SUCCESSFUL', { transaction_id: 't1' }, held);
    const tx = (await store.begin('t1:SUCCESSFUL', held.id))!;
    const db = tx.tx;
    const insert = db.prepare('INSERT INTO ledger VALUES (?, ?)');
    insert.run('t1', 5);
    const rows = db.prepare('SELECT 1 AS n UNION ALL SELECT 2').iterate();
    rows.next();
    let finish!: () => void;
    const listeners = new Promise<void>((resolve) => (finish = resolve));
    await tx.rollback(listeners);
    return { db, insert, rows, finish: () => (rows.return?.(), finish()) };
  }
  async function nextAttemptCommits(store: SqliteStore<Database.Database>, database: Database.Database) {
    const next = { id: randomUUID(), ms: 60_000 };
    await store.receive('t3:SUCCESSFUL', { transaction_id: 't3' }, next);
    const again = (await store.begin('t3:SUCCESSFUL', next.id))!;
    again.tx.prepare('INSERT INTO ledger VALUES (?, ?)').run('t3', 5);
    expect(await again.commit()).toBe('delivered');
    expect(ledgerRows(database, 't3')).toBe(1);
  }

  test("an abandoned attempt whose listener holds an open iterator on db: it is rolled back at once, the store's next write goes through while the listener still iterates, and the listener's late writes do not land", async () => {
    const { store, database } = await newStore(2_000);
    const { db, insert, rows, finish } = await abandonedWithIterator(store);

    expect(await store.receive('t2:SUCCESSFUL', { transaction_id: 't2' }, { id: 'l2', ms: 60_000 })).toBe(
      true,
    );
    expect(ledgerRows(database, 't1')).toBe(0);
    // The listener goes on: its iteration, then writes through a statement it prepared and a new one.
    rows.next();
    expect(() => insert.run('t1', 6)).toThrow(/readonly/i);
    // A new statement is refused by the core (every use of db once the attempt ended), the prepared one by
    // SQLite (the connection was made read-only).
    expect(() => db.prepare('INSERT INTO ledger VALUES (?, ?)').run('t1', 7)).toThrow(
      /the delivery transaction of t1:SUCCESSFUL has ended/,
    );
    finish();
    expect(ledgerRows(database, 't1')).toBe(0);
    await nextAttemptCommits(store, database);
  });

  test("an abandoned attempt holding an iterator, on a driver that runs nothing while one is open: the store's next write waits for the listeners and the rollback, instead of failing on its lock", async () => {
    const path = join(folder, `${randomUUID().slice(0, 8)}.db`);
    const database = open(path);
    // better-sqlite3 without its unsafe mode: no statement at all while an iterator is open.
    const connect = () => Object.defineProperty(open(path), 'unsafeMode', { value: undefined });
    const store = new SqliteStore({ database, connect, busyTimeoutMs: 2_000 });
    await store.migrate();
    database.exec('CREATE TABLE ledger (transaction_id TEXT NOT NULL, amount REAL)');
    const { finish } = await abandonedWithIterator(store);

    let receivedYet = false;
    const received = store
      .receive('t2:SUCCESSFUL', { transaction_id: 't2' }, { id: 'l2', ms: 60_000 })
      .finally(() => (receivedYet = true));
    await new Promise((resolve) => setImmediate(resolve));
    expect(receivedYet).toBe(false);
    finish();

    expect(await received).toBe(true);
    expect(ledgerRows(database, 't1')).toBe(0);
    await nextAttemptCommits(store, database);
  });
});
