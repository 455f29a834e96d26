import type { FinalState } from '../../notification/schema.js';
import {
  batchedDecide,
  type Decision,
  type LifecycleStore,
  type LifecycleVerdict,
  statesOf,
} from '../lifecycle-store.js';
import { checkKey } from './postgres-rows.js';
import { statesTable, tableNames } from './postgres-sql.js';

/** What the lifecycle runs its statement through: the store's own query (with its error messages). */
type Query = (text: string, values: unknown[]) => Promise<{ rows: unknown[] }>;

/**
 * Each transaction's accepted final state in PostgreSQL, in `<table>_states` (made by `migrate()` and
 * `postgresSchemaSql()`), kept until you delete it. The decisions that arrive together go as one statement
 * ({@link batchedDecide}): `INSERT ... ON CONFLICT DO UPDATE` takes each transaction's row lock (waiting for
 * a concurrent decision's commit), so two instances' decisions of one transaction take turns, and it takes
 * them in the order of the transaction ids, so that two instances' batches never wait for each other in a
 * circle. A SUCCESSFUL is never overwritten.
 * @inline
 */
export class PostgresLifecycle implements LifecycleStore {
  readonly #decide: (decision: Decision) => Promise<LifecycleVerdict>;

  constructor(query: Query, table: string, stallMs: () => number) {
    const t = statesTable(tableNames(table).quoted);
    const sql = `INSERT INTO ${t} AS s (transaction_id, state)
      SELECT u.transaction_id, u.state FROM unnest($1::text[], $2::text[]) AS u(transaction_id, state)
      ORDER BY u.transaction_id
      ON CONFLICT (transaction_id) DO UPDATE SET decided_at = now(),
        state = CASE WHEN s.state = 'SUCCESSFUL' THEN s.state ELSE EXCLUDED.state END
      RETURNING transaction_id, state`;
    this.#decide = batchedDecide(
      async (decisions) => {
        const { rows } = await query(sql, [
          decisions.map(({ transactionId }) => transactionId),
          decisions.map(({ state }) => state),
        ]);
        // Every row the statement upserts is returned: a missing one is a failure, never a guess.
        return statesOf(decisions, rows);
      },
      stallMs,
      checkKey,
    );
  }

  /**
   * `ttlMs` is not applied: rows stay, as the inbox's do. A transaction id a `text` column cannot hold
   * exactly (a NUL, a lone surrogate) rejects this decision with a TypeError before it is queued: sent, it
   * would fail every decision of its batch.
   */
  decide(transactionId: string, state: FinalState, ttlMs: number): Promise<LifecycleVerdict> {
    return this.#decide({ transactionId, state, ttlMs });
  }
}
