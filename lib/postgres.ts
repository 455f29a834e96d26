/**
 * `ipn-kit/postgres`: a dedupe store and durable inbox in PostgreSQL, over your own `pg` pool. This entry
 * point loads no PostgreSQL package itself.
 * @packageDocumentation
 */
export { PostgresStore } from './stores/postgres-store.js';
export type { PostgresStoreOptions, PgQueryable, PgQueryResult } from './stores/postgres-store.js';
export type {
  PgClientOf,
  PgConnectingPool,
  PgPoolClient,
  PgPromisePool,
} from './stores/postgres-transaction.js';
export { postgresSchemaSql } from './stores/postgres-sql.js';
export { postgresExpectationsSql } from './stores/postgres-expectations.js';
export type { PostgresExpectations } from './stores/postgres-expectations.js';
