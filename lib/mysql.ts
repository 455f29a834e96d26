/**
 * `ipn-kit/mysql`: a dedupe store and durable inbox in MySQL 8 or MariaDB 10.6+, over your own mysql2 pool.
 * This entry point loads no MySQL package itself.
 * @packageDocumentation
 */
export { MysqlStore } from './stores/mysql/mysql-store.js';
export type { MysqlStoreOptions } from './stores/mysql/mysql-store.js';
export type { MysqlPool, MysqlPoolConnection } from './stores/mysql/mysql-pool.js';
export { mysqlSchemaSql, mysqlExpectationsSql, mysqlAuditSql } from './stores/mysql/mysql-sql.js';
export { mysqlExpectationsAccountSql } from './stores/mysql/mysql-expectations.js';
export { mysqlLifecycleSql } from './stores/mysql/mysql-lifecycle.js';
