/**
 * A hand-written `Transactions` over a plain `pg` pool: what a partner writes for an ORM that ipn-kit/orm
 * does not cover, in a few lines. docs/orm.md quotes it; the ORM scenarios run it (test/fixtures/orm/pg.ts).
 */
import type { Pool, PoolClient } from 'pg';
import type { Transactions } from 'ipn-kit/orm';

// #region hand-written-transactions
/** Each delivery attempt in a transaction on one client of `pool`; `tx` is that client. */
export function pgTransactions(pool: Pool): Transactions<PoolClient> {
  return {
    name: 'pg',
    async transaction(work) {
      const client = await pool.connect();
      // The server ending the connection meanwhile (a failover) makes the client emit 'error', which would
      // crash the process with no listener: its queries fail, and so does the transaction.
      const failed = (): void => {};
      client.on('error', failed);
      try {
        await client.query('BEGIN');
        const result = await work(client);
        await client.query('COMMIT');
        client.removeListener('error', failed);
        client.release();
        return result;
      } catch (error) {
        // Closed rather than given back (closing rolls back): a write a listener still makes through it
        // fails, instead of landing outside any transaction on a client of the pool.
        client.release(true);
        throw error;
      }
    },
    async query(client, { text, values }) {
      const result = await client.query(text, values);
      return { rows: result.rows as Array<Record<string, unknown>>, count: result.rowCount ?? 0 };
    },
    async execute({ text, values }) {
      const result = await pool.query(text, values);
      return { rows: result.rows as Array<Record<string, unknown>>, count: result.rowCount ?? 0 };
    },
  };
}
// #endregion hand-written-transactions
