/**
 * The partner app of the demo's crash scene when there is no PostgreSQL (`examples/crash-recovery.ts`), in a
 * process of its own so that the scene can kill it: a SQLite inbox in one file, at-least-once delivery, and
 * a `successful` listener that credits the order it was initiated for (its transaction, its amount, once)
 * with one ledger row in the same file, written through `db` (the delivery's own connection), inside the
 * delivery's transaction. `examples/ledger-app.ts` is the same app on PostgreSQL.
 *
 * Run with `node --import tsx`; configured by the environment: SQLITE_FILE, INBOX_TABLE, LEDGER_TABLE,
 * ORDERS_TABLE, LEASE_MS, and HOLD_AFTER_WRITE=1 to keep the first attempt open after its write, until the
 * scene kills the process. Talks to the scene over IPC as `examples/ledger-app.ts` does: `{ type: 'ready',
 * url }` once it listens, then `{ type: 'written', transactionId, attempt }` each time its listener wrote a ledger row.
 *
 * No `verify`, to keep the scene about the crash: a real app confirms each notification as the demo's first
 * scene does, before crediting it.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import Database from 'better-sqlite3';
import { ipnRouter } from 'ipn-kit';
import { SqliteStore } from 'ipn-kit/sqlite';

const file = process.env.SQLITE_FILE;
if (!file) throw new Error('SQLITE_FILE: the SQLite file of the inbox and the ledger');
const ledger = process.env.LEDGER_TABLE ?? 'ledger';
const orders = process.env.ORDERS_TABLE ?? 'orders';

const ipn = ipnRouter({
  // The store opens a second connection to the file for delivery transactions: the listener's `db`.
  store: new SqliteStore({ database: new Database(file), table: process.env.INBOX_TABLE }),
  delivery: 'at-least-once',
  // 60 s by default; the scene shortens it, so that the restarted app takes the notification up quickly.
  leaseMs: process.env.LEASE_MS === undefined ? undefined : Number(process.env.LEASE_MS),
  recoveryIntervalMs: 200, // 15 s by default
  // The demo's crash scene, posted to by the demo itself on loopback; a real app gives the service
  // ipnUrl(url, secret) and passes `secret` here (see the quick start).
  acknowledgeUnprotected: true,
});

ipn.on('successful', async (n, { db, attempt }) => {
  // Only the order this transaction was initiated for (custom_data), for its amount, and only once:
  // otherwise the throw rolls back, and after its retries the notification is `dead`, for a person to see.
  const paid = db
    .prepare(
      `UPDATE ${orders} SET paid_at = datetime('now') WHERE id = ? AND transaction_id = ? AND amount = ? AND paid_at IS NULL`,
    )
    .run(n.custom_data, n.transaction_id, n.amount);
  if (paid.changes !== 1) throw new Error(`${n.transaction_id} is not the payment of order ${n.custom_data}`);
  // No unique key on the ledger: this row commits with the inbox's `delivered` mark, or not at all.
  db.prepare(`INSERT INTO ${ledger} (transaction_id, order_id, amount) VALUES (?, ?, ?)`).run(
    n.transaction_id,
    n.custom_data,
    n.amount,
  );
  process.send?.({ type: 'written', transactionId: n.transaction_id, attempt });
  // The crash: the row is written, the COMMIT not yet run. The scene kills this process here.
  if (process.env.HOLD_AFTER_WRITE === '1') await new Promise(() => {});
});

const server = createServer(ipn).listen(0, '127.0.0.1', () => {
  process.send?.({ type: 'ready', url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/ipn` });
});
// The scene went away (Ctrl-C, or it failed): nothing is left running.
process.on('disconnect', () => process.exit(0));
