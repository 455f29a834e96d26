/**
 * `ipn-kit/postgres`: a dedupe store and durable inbox in PostgreSQL, over your own `pg` pool. This entry
 * point loads no PostgreSQL package itself.
 * @packageDocumentation
 */
export { PostgresStore } from './stores/postgres/postgres-store.js';
export type { PostgresStoreOptions } from './stores/postgres/postgres-store.js';
export type { PgQueryable } from './stores/postgres/postgres-store.js';
export { postgresSchemaSql } from './stores/postgres/postgres-sql.js';
export {
  postgresExpectationsSql,
  postgresExpectationsAccountSql,
} from './stores/postgres/postgres-expectations.js';
export { postgresAuditSql } from './stores/postgres/postgres-audit.js';
