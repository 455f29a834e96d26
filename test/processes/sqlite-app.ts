/**
 * A partner app crediting its ledger in the same SQLite file as its inbox (`FILE`), at least once, through
 * the delivery transaction's `db`; with `CRASH=1` it kills itself (SIGKILL) right after its first credit,
 * before the delivery's commit. Sends `{ url }` over IPC once it listens. For
 * test/integration/sqlite-exactly-once-crash.test.ts.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import Database from 'better-sqlite3';
import { ipnRouter } from 'ipn-kit';
import { SqliteStore } from 'ipn-kit/sqlite';

function main(): void {
  const file = process.env.FILE;
  if (!file) throw new Error('FILE: the SQLite file to open');
  const store = new SqliteStore({ database: new Database(file) });
  const ipn = ipnRouter({
    store,
    delivery: 'at-least-once',
    leaseMs: 1_000,
    recoveryIntervalMs: 100,
    logger: { debug() {}, info() {}, warn() {}, error() {} },
  });
  ipn.on('successful', (n, { db }) => {
    db.prepare('INSERT INTO ledger (transaction_id, amount) VALUES (?, ?)').run(n.transaction_id, n.amount);
    if (process.env.CRASH === '1') process.kill(process.pid, 'SIGKILL');
  });
  const server = createServer(ipn).listen(0, '127.0.0.1', () => {
    process.send?.({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` });
  });
}

main();
