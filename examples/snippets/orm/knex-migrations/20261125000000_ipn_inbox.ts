import type { Knex } from 'knex';
import { postgresExpectationsSql, postgresSchemaSql } from 'ipn-kit/postgres';

/** ipn-kit's inbox, and the table of `ipn.expect()`: what `store.migrate()` would create. */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(postgresSchemaSql());
  await knex.raw(postgresExpectationsSql());
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(
    'DROP TABLE IF EXISTS ipn_inbox_schema, ipn_inbox_control, ipn_inbox_claims, ipn_inbox_audit, ipn_inbox_states, ipn_inbox_expected, ipn_inbox; ' +
      'DROP FUNCTION IF EXISTS ipn_inbox_mark(text, text)',
  );
}
