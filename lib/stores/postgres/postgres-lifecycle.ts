import type { FinalState } from '../../notification/schema.js';
import { verdictOf, type LifecycleStore, type LifecycleVerdict } from '../lifecycle-store.js';
import { statesTable, tableNames } from './postgres-sql.js';

/** What the lifecycle runs its statement through: the store's own query (with its error messages). */
type Query = (text: string, values: unknown[]) => Promise<{ rows: unknown[] }>;

/**
 * Each transaction's accepted final state in PostgreSQL, in `<table>_states` (made by `migrate()` and
 * `postgresSchemaSql()`), kept until you delete it. One statement per decision: `INSERT ... ON CONFLICT DO
 * UPDATE` takes the transaction's row lock (waiting for a concurrent decision's commit), so two instances'
 * decisions of one transaction take turns. A SUCCESSFUL is never overwritten.
 * @inline
 */
export class PostgresLifecycle implements LifecycleStore {
  readonly #query: Query;
  readonly #sql: string;

  constructor(query: Query, table: string) {
    this.#query = query;
    const t = statesTable(tableNames(table).quoted);
    this.#sql = `INSERT INTO ${t} AS s (transaction_id, state) VALUES ($1, $2)
      ON CONFLICT (transaction_id) DO UPDATE SET decided_at = now(),
        state = CASE WHEN s.state = 'SUCCESSFUL' THEN s.state ELSE EXCLUDED.state END
      RETURNING state`;
  }

  /** `ttlMs` is not applied: rows stay, as the inbox's do. */
  async decide(transactionId: string, state: FinalState): Promise<LifecycleVerdict> {
    const { rows } = await this.#query(this.#sql, [transactionId, state]);
    // The state kept is SUCCESSFUL, for a FAILED asked, only when a SUCCESSFUL was recorded before.
    return verdictOf((rows[0] as { state?: unknown } | undefined)?.state, state);
  }
}
