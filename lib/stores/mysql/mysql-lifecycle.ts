import type { FinalState } from '../../notification/schema.js';
import { batchedDecide, type LifecycleStore, type LifecycleVerdict, statesOf } from '../lifecycle-store.js';
import { rowsOf, type MysqlPoolConnection } from './mysql-pool.js';
import { checkKey } from './mysql-rows.js';
import { mysqlBeside } from './mysql-sql.js';

/** The lifecycle table beside the inbox `table`: `<table>_states`, in the same database, quoted. */
const statesTable = (table: string, owner?: string): string => mysqlBeside(table, '_states', owner);

/**
 * The SQL that creates the lifecycle table beside the inbox `table` (`<table>_states`: each transaction's
 * accepted final state), for teams that run their own migrations; `MysqlStore.migrate()` runs it too.
 * Idempotent.
 * @example
 * import { mysqlLifecycleSql } from 'ipn-kit/mysql';
 * await pool.query(mysqlLifecycleSql('ipn_inbox'));
 */
export function mysqlLifecycleSql(table = 'ipn_inbox'): string {
  return `CREATE TABLE IF NOT EXISTS ${statesTable(table, 'mysqlLifecycleSql')} (
  transaction_id VARCHAR(255) NOT NULL,
  state VARCHAR(32) NOT NULL,
  decided_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (transaction_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin`;
}

/**
 * Checks that `<table>_states` keeps `transactionId` as a row of its own: what the inbox's keys must be, and
 * no trailing space, which MySQL's collations ignore when they compare (`'abc '` would be `'abc'`'s row).
 * @throws TypeError for any other id.
 */
function checkId(transactionId: string): void {
  checkKey(transactionId);
  if (transactionId.endsWith(' ')) {
    throw new TypeError(
      `MysqlStore: a transaction id cannot end with a space, got ${JSON.stringify(transactionId)}`,
    );
  }
}

/** Runs work in a transaction on one connection of the pool (the store's own, with its error messages). */
type InTransaction = <T>(work: (connection: MysqlPoolConnection) => Promise<T>) => Promise<T>;

/**
 * Each transaction's accepted final state in MySQL, in `<table>_states`, kept until you delete it. The
 * decisions that arrive together go as one transaction ({@link batchedDecide}): one upsert of all their
 * rows takes each row's lock (waiting for a concurrent decision's commit), and the read that follows sees
 * the states it left, under those locks. The rows go in the order of the transaction ids, so that two
 * instances' batches take the locks in the same order and never wait for each other in a circle. A
 * SUCCESSFUL is never overwritten.
 * @inline
 */
export class MysqlLifecycle implements LifecycleStore {
  readonly #decide: ReturnType<typeof batchedDecide>;

  constructor(transaction: InTransaction, table: string, stallMs: () => number) {
    const t = statesTable(table);
    this.#decide = batchedDecide(
      (decisions) =>
        transaction(async (connection) => {
          // sort(): by UTF-16 code units, one order on every instance, whatever its locale.
          const ids = decisions.map(({ transactionId }) => transactionId).sort();
          const states = new Map(decisions.map(({ transactionId, state }) => [transactionId, state]));
          await connection.query(
            `INSERT INTO ${t} (transaction_id, state) VALUES ${ids.map(() => '(?, ?)').join(', ')}
             ON DUPLICATE KEY UPDATE decided_at = CURRENT_TIMESTAMP(3),
               state = IF(state = 'SUCCESSFUL', state, VALUES(state))`,
            ids.flatMap((id) => [id, states.get(id)]),
          );
          const rows = rowsOf(
            await connection.query(`SELECT transaction_id, state FROM ${t} WHERE transaction_id IN (?)`, [
              ids,
            ]),
          );
          // utf8mb4_bin: each row read carries its id exactly as written (checkId refused trailing spaces,
          // which it ignores).
          return statesOf(decisions, rows);
        }),
      stallMs,
      checkId,
    );
  }

  /** `ttlMs` is not applied: rows stay, as the inbox's do. */
  decide(transactionId: string, state: FinalState, ttlMs: number): Promise<LifecycleVerdict> {
    return this.#decide({ transactionId, state, ttlMs });
  }
}
