import type { FinalState } from '../../notification/schema.js';
import { verdictOf, type LifecycleStore, type LifecycleVerdict } from '../lifecycle-store.js';
import { rowsOf, type MysqlPoolConnection } from './mysql-pool.js';
import { mysqlTableNames } from './mysql-sql.js';

const SUFFIX = '_states';

/** The lifecycle table beside the inbox `table`: `<table>_states`, in the same database, quoted. */
function statesTable(table: string, owner?: string): string {
  const { quoted } = mysqlTableNames(table, owner);
  const parts = quoted.split('.');
  const name = (parts.pop() as string).slice(1, -1);
  return [...parts, `\`${name.slice(0, 64 - SUFFIX.length)}${SUFFIX}\``].join('.');
}

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

/** Runs work in a transaction on one connection of the pool (the store's own, with its error messages). */
type InTransaction = <T>(work: (connection: MysqlPoolConnection) => Promise<T>) => Promise<T>;

/**
 * Each transaction's accepted final state in MySQL, in `<table>_states`, kept until you delete it. A
 * decision is one transaction: the upsert takes the row's lock (waiting for a concurrent decision's
 * commit), and the read that follows sees the state it left, under that lock. A SUCCESSFUL is never
 * overwritten.
 * @inline
 */
export class MysqlLifecycle implements LifecycleStore {
  readonly #transaction: InTransaction;
  readonly #t: string;

  constructor(transaction: InTransaction, table: string) {
    this.#transaction = transaction;
    this.#t = statesTable(table);
  }

  /** `ttlMs` is not applied: rows stay, as the inbox's do. */
  async decide(transactionId: string, state: FinalState): Promise<LifecycleVerdict> {
    return this.#transaction(async (connection) => {
      await connection.query(
        `INSERT INTO ${this.#t} (transaction_id, state) VALUES (?, ?)
         ON DUPLICATE KEY UPDATE decided_at = CURRENT_TIMESTAMP(3),
           state = IF(state = 'SUCCESSFUL', state, VALUES(state))`,
        [transactionId, state],
      );
      const [row] = rowsOf(
        await connection.query(`SELECT state FROM ${this.#t} WHERE transaction_id = ?`, [transactionId]),
      );
      // The state kept is SUCCESSFUL, for a FAILED asked, only when a SUCCESSFUL was recorded before.
      return verdictOf(row?.state, state);
    });
  }
}
