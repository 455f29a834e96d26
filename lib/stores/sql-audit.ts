import { auditPage } from './audit-page.js';
import type { AuditEntry, AuditListOptions, AuditLog } from './store.js';

/** Runs one statement with `?` placeholders: a write, or a read that resolves its rows. */
interface Run {
  write(text: string, values: unknown[]): Promise<unknown>;
  read(text: string, values: unknown[]): Promise<Array<Record<string, unknown>>>;
}

/** The audit table's columns, in the dialects with `?` placeholders and no JSON type of their own (MySQL, SQLite). */
export const SQL_AUDIT_COLUMNS = 'at_ms, action, actor, detail';

/**
 * Operator actions in `<table>_audit` of `MysqlStore` and `SqliteStore` (the same statements in both: `?`
 * placeholders, the time in milliseconds of the app's clock, `detail` as JSON text). Their DDL is each
 * dialect's own (`mysqlAuditSql`, `sqliteAuditSql`).
 * @inline
 */
export class SqlAudit implements AuditLog {
  readonly #run: Run;
  readonly #table: string;

  /** `table`: the audit table, quoted in the dialect. */
  constructor(run: Run, table: string) {
    this.#run = run;
    this.#table = table;
  }

  async record(entry: Omit<AuditEntry, 'at'>): Promise<void> {
    const values = [Date.now(), entry.action, entry.actor, JSON.stringify(entry.detail)];
    await this.#run.write(`INSERT INTO ${this.#table} (${SQL_AUDIT_COLUMNS}) VALUES (?, ?, ?, ?)`, values);
  }

  async list(options?: AuditListOptions): Promise<AuditEntry[]> {
    // Whole numbers, bounded by auditPage: safe in the text (MySQL's prepared LIMIT wants no placeholder).
    const { limit, offset } = auditPage(options);
    const rows = await this.#run.read(
      `SELECT ${SQL_AUDIT_COLUMNS} FROM ${this.#table} ORDER BY id DESC LIMIT ${limit} OFFSET ${offset}`,
      [],
    );
    return rows.map((row) => ({
      action: String(row.action),
      actor: String(row.actor),
      detail: JSON.parse(String(row.detail)) as Record<string, unknown>,
      at: new Date(Number(row.at_ms)),
    }));
  }
}
