/**
 * `ipn-kit/postgres`: a dedupe store and durable inbox in PostgreSQL, over your own `pg` pool. This entry
 * point loads no PostgreSQL package itself.
 * @packageDocumentation
 */
export { PostgresStore } from './stores/postgres/postgres-store.js';
export type { PostgresStoreOptions } from './stores/postgres/postgres-store.js';
export type { PgQueryable } from './stores/postgres/postgres-store.js';
export { postgresSchemaSql, postgresMigrations } from './stores/postgres/postgres-schema.js';
export type { SchemaMigration, MigrationReport, MigrateOptions } from './stores/schema-migrations.js';
export { postgresExpectationsSql } from './stores/postgres/postgres-expectations.js';
export { postgresAuditSql } from './stores/postgres/postgres-audit.js';
