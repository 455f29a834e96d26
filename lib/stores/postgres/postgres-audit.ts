import { auditPage } from '../audit-page.js';
import type { AuditEntry, AuditListOptions, AuditLog } from '../store.js';
import { besideInbox } from './postgres-sql.js';

/** What the audit log runs its queries through: the store's own query (with its error messages). */
type Query = (text: string, values: unknown[]) => Promise<{ rows: unknown[]; rowCount: number | null }>;

/** The audit table beside inbox `table`: `<table>_audit`, in the same schema. */
const auditTable = (table: string): string => besideInbox(table, '_audit');

/**
 * The SQL that creates the audit table beside the inbox `table` (`<table>_audit`: one row per operator
 * action), for teams that run their own migrations; `PostgresStore.migrate()` runs it too, as a statement of
 * its own. Idempotent. `detail` is `json`, not `jsonb`: kept as written, its keys in their order.
 */
export function postgresAuditSql(table = 'ipn_inbox'): string {
  return `CREATE TABLE IF NOT EXISTS ${auditTable(table)} (
  id bigserial PRIMARY KEY,
  at timestamptz NOT NULL DEFAULT now(),
  action text NOT NULL,
  actor text NOT NULL,
  detail json NOT NULL
);
`;
}

interface Row {
  action: string;
  actor: string;
  detail: Record<string, unknown>;
  at: Date;
}

/**
 * Operator actions in PostgreSQL, in `<table>_audit`: shared by every instance, kept until you delete them.
 * @inline
 */
export class PostgresAudit implements AuditLog {
  readonly #query: Query;
  readonly #insert: string;
  readonly #list: string;

  constructor(query: Query, table: string) {
    this.#query = query;
    const t = auditTable(table);
    this.#insert = `INSERT INTO ${t} (action, actor, detail) VALUES ($1, $2, $3::json)`;
    this.#list = `SELECT action, actor, detail, at FROM ${t} ORDER BY id DESC LIMIT $1 OFFSET $2`;
  }

  async record(entry: Omit<AuditEntry, 'at'>): Promise<void> {
    await this.#query(this.#insert, [entry.action, entry.actor, JSON.stringify(entry.detail)]);
  }

  async list(options?: AuditListOptions): Promise<AuditEntry[]> {
    const { limit, offset } = auditPage(options);
    const { rows } = await this.#query(this.#list, [limit, offset]);
    return (rows as Row[]).map((row) => ({ ...row, at: new Date(row.at) }));
  }
}
