// Type tests of ipn-kit/mysql, checked by `tsc --noEmit`: a line under @ts-expect-error must not compile.
import { createPool, type Connection, type PoolConnection } from 'mysql2/promise';
import * as mysql from 'mysql2';
import knex, { type Knex } from 'knex';
import { ipnRouter } from '../../lib/index.js';
import { MysqlStore, type MysqlPool } from '../../lib/mysql.js';
import type { Transactions } from '../../lib/orm.js';

// A mysql2/promise pool is a MysqlPool; at least once, listeners get its PoolConnection as tx and db.
const pool = createPool({ uri: 'mysql://root@127.0.0.1:3306/app' });
const asPool: MysqlPool = pool;
const store = new MysqlStore({ pool, table: 'ipn_inbox' });
const transactional = ipnRouter({ store, delivery: 'at-least-once' });
transactional.on('successful', async (n, { db, tx, attempt }) => {
  const connection: PoolConnection = db;
  const same: PoolConnection = tx;
  await db.query('INSERT INTO ledger (transaction_id, amount) VALUES (?, ?)', [n.transaction_id, n.amount]);
  void [connection, same, attempt];
});
// At most once, the same store opens no transaction: no db.
const atMostOnce = ipnRouter({ store: new MysqlStore({ pool }) });
// @ts-expect-error no db at most once
atMostOnce.on('successful', (n, { db }) => void db.query('SELECT 1'));

// A pool of the callback API is not one (its query answers no promise): pass pool.promise().
// @ts-expect-error a callback pool
void new MysqlStore({ pool: mysql.createPool({}) });
void new MysqlStore({ pool: mysql.createPool({}).promise() });
// A single connection hands out none: not a pool.
declare const connection: Connection;
// @ts-expect-error a single connection
void new MysqlStore({ pool: connection });
// @ts-expect-error the pool is required
void new MysqlStore({ table: 'ipn_inbox' });

// With an ORM's transactions, listeners get the ORM's transaction as tx, and no db.
declare const orm: Knex;
declare const knexTransactions: (db: Knex) => Transactions<Knex.Transaction>;
const withOrm = ipnRouter({
  store: new MysqlStore({ pool, transactions: knexTransactions(orm) }),
  delivery: 'at-least-once',
});
withOrm.on('successful', async (n, { tx }) => {
  const trx: Knex.Transaction = tx;
  await trx('ledger').insert({ transaction_id: n.transaction_id });
});
// @ts-expect-error no db beside the ORM's tx
withOrm.on('successful', (n, { db }) => void db.query('SELECT 1'));
void [asPool, knex];
