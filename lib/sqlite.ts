/**
 * `ipn-kit/sqlite`: a dedupe store and durable inbox in one SQLite file, over your own better-sqlite3
 * `Database`: the embedded durable default for an app on one machine. This entry point loads no SQLite
 * package itself.
 * @packageDocumentation
 */
export { SqliteStore } from './stores/sqlite/sqlite-store.js';
export type { SqliteStoreOptions } from './stores/sqlite/sqlite-store.js';
export type { SqliteDatabase, SqliteStatement } from './stores/sqlite/sqlite-connection.js';
export { sqliteSchemaSql, sqliteAuditSql } from './stores/sqlite/sqlite-sql.js';
export { sqliteExpectationsAccountSql } from './stores/sqlite/sqlite-expectations.js';
