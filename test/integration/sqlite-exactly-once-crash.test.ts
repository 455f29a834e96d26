import { fork, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { SqliteStore } from 'ipn-kit/sqlite';
import { uniquePayload } from '../helpers/payloads.js';
import { eventually } from '../helpers/services.js';

// Each process start costs a second or two of CPU on a shared 2-core machine.
jest.setTimeout(90_000);

/** Starts test/processes/sqlite-app.ts on `file`; `crash`: it kills itself after its first credit. */
async function startApp(file: string, crash: boolean): Promise<{ child: ChildProcess; url: string }> {
  const child = fork(join(__dirname, '..', 'processes', 'sqlite-app.ts'), [], {
    execArgv: ['--import', 'tsx'],
    env: { ...process.env, FILE: file, CRASH: crash ? '1' : '' },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const url = await new Promise<string>((resolve, reject) => {
    child.once('message', (message: { url: string }) => resolve(message.url));
    child.once('exit', (code, signal) =>
      reject(new Error(`the app exited before it listened: ${code ?? signal}`)),
    );
  });
  return { child, url };
}

const post = (url: string, body: unknown) =>
  fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

describe('exactly once on a ledger in the SQLite file, two processes, one SIGKILLed before its commit', () => {
  const folder = mkdtempSync(join(tmpdir(), 'ipn-sqlite-crash-'));
  const file = join(folder, 'app.db');
  const children: ChildProcess[] = [];
  let database: Database.Database;
  let store: SqliteStore<Database.Database>;
  beforeAll(async () => {
    database = new Database(file);
    store = new SqliteStore({ database });
    await store.migrate();
    // No unique key: a second credit of a payment would be a second row.
    database.exec('CREATE TABLE ledger (transaction_id TEXT NOT NULL, amount REAL)');
  });
  afterAll(() => {
    for (const child of children)
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    database.close();
    rmSync(folder, { recursive: true, force: true });
  });
  const rows = (id: unknown) =>
    (database.prepare('SELECT count(*) AS n FROM ledger WHERE transaction_id = ?').get(id) as { n: number })
      .n;
  const delivered = (payload: Record<string, unknown>) => {
    const key = `${String(payload.transaction_id)}:SUCCESSFUL`;
    return eventually(`${key} delivered`, async () => (await store.get(key))?.status === 'delivered');
  };

  test('the killed process is restarted; the other keeps delivering; each payment has one row', async () => {
    const crashing = await startApp(file, true);
    const other = await startApp(file, false);
    children.push(crashing.child, other.child);
    const killed = new Promise<NodeJS.Signals | null>((resolve) =>
      crashing.child.once('exit', (_, signal) => resolve(signal)),
    );

    const payment = uniquePayload();
    expect((await post(crashing.url, payment)).status).toBe(200); // stored before the 200
    expect(await killed).toBe('SIGKILL'); // after its credit, before its commit
    // The file's write lock died with it: the other process takes receives and deliveries at once.
    const meanwhile = uniquePayload();
    expect((await post(other.url, meanwhile)).status).toBe(200);

    const restarted = await startApp(file, false);
    children.push(restarted.child);
    const after = [uniquePayload(), uniquePayload()];
    for (const [index, payload] of after.entries()) {
      expect((await post([restarted.url, other.url][index]!, payload)).status).toBe(200);
    }
    for (const payload of [payment, meanwhile, ...after]) await delivered(payload);
    for (const payload of [payment, meanwhile, ...after]) expect(rows(payload.transaction_id)).toBe(1);
    expect((await store.get(`${String(payment.transaction_id)}:SUCCESSFUL`))?.attempts).toBeGreaterThan(1);
  });
});
