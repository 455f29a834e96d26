import type { QueryInterface } from 'sequelize';
import { postgresExpectationsSql, postgresSchemaSql } from 'ipn-kit/postgres';

/** ipn-kit's inbox, and the table of `ipn.expect()`: what `store.migrate()` would create. */
export async function up(queryInterface: QueryInterface): Promise<void> {
  await queryInterface.sequelize.query(postgresSchemaSql());
  await queryInterface.sequelize.query(postgresExpectationsSql());
}

export async function down(queryInterface: QueryInterface): Promise<void> {
  await queryInterface.sequelize.query(
    'DROP TABLE IF EXISTS ipn_inbox_schema, ipn_inbox_control, ipn_inbox_claims, ipn_inbox_audit, ipn_inbox_states, ipn_inbox_expected, ipn_inbox; ' +
      'DROP FUNCTION IF EXISTS ipn_inbox_mark(text, text)',
  );
}
