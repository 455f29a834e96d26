import type { FinalState } from '../../notification/schema.js';
import { verdictOf, type LifecycleStore, type LifecycleVerdict } from '../lifecycle-store.js';

/** Runs one writing statement and resolves its rows (the store's own, under its write gate). */
type WriteReturning = (text: string, values: unknown[]) => Promise<unknown[]>;

/**
 * Each transaction's accepted final state in SQLite, in `<table>_states` (made by `migrate()` and
 * `sqliteSchemaSql()`), kept until you delete it. One upsert per decision, under the file's write lock:
 * atomic across every process on the file. A SUCCESSFUL is never overwritten.
 * @inline
 */
export class SqliteLifecycle implements LifecycleStore {
  readonly #write: WriteReturning;
  readonly #sql: string;

  constructor(write: WriteReturning, table: string) {
    this.#write = write;
    this.#sql = `INSERT INTO "${table}_states" (transaction_id, state, decided_at) VALUES (?, ?, ?)
      ON CONFLICT (transaction_id) DO UPDATE SET decided_at = excluded.decided_at,
        state = CASE WHEN state = 'SUCCESSFUL' THEN state ELSE excluded.state END
      RETURNING state`;
  }

  /** `ttlMs` is not applied: rows stay, as the inbox's do. */
  async decide(transactionId: string, state: FinalState): Promise<LifecycleVerdict> {
    const [row] = await this.#write(this.#sql, [transactionId, state, Date.now()]);
    // The state kept is SUCCESSFUL, for a FAILED asked, only when a SUCCESSFUL was recorded before.
    return verdictOf((row as { state?: unknown } | undefined)?.state, state);
  }
}
