import { Landed, type Run } from '../../../lib/stores/orm-transaction.js';
import { mysqlOrmMark } from '../../../lib/stores/mysql/mysql-transaction.js';
import type { Statement, StatementResult } from '../../../lib/stores/transactions.js';
import { DeliveryError } from '../../../lib/shared/errors.js';

/** `SHOW SESSION STATUS` rows, as mysql2 gives them (values are strings). */
const status = (counts: Record<string, string>): StatementResult => ({
  rows: Object.entries(counts).map(([Variable_name, Value]) => ({ Variable_name, Value })),
  count: 0,
});

/**
 * A session whose listener ended the transaction (the savepoint is gone): `run` answers the opening's
 * and the mark's `SHOW SESSION STATUS` with `before` then `after`.
 */
const endedSession = (before: Record<string, string>, after: Record<string, string>): Run => {
  const shows = [status(before), status(after)];
  return (statement: Statement) => {
    if (statement.text.startsWith('RELEASE SAVEPOINT')) {
      return Promise.reject(Object.assign(new Error('SAVEPOINT does not exist'), { errno: 1305 }));
    }
    return Promise.resolve(statement.text.startsWith('SHOW') ? shows.shift()! : { rows: [], count: 0 });
  };
};

const mark: Statement = { text: 'UPDATE inbox SET status = ?', values: ['delivered'], returns: 'count' };

describe('mysqlOrmMark, the savepoint gone', () => {
  // MariaDB 10.11 takes 1 off Com_create_table for a CREATE TEMPORARY SEQUENCE: a session that had created
  // no table holds 2^64 - 1 from then on. Added up as numbers with the other counts, a DROP TABLE moving
  // Com_drop_table from 3 to 4 was lost in the rounding: taken for a deadlock's rollback, and retried
  // (the credit written twice).
  test('a count that moved beside one that wrapped: Landed', async () => {
    const before = {
      Com_commit: '7',
      Com_rollback: '2',
      Com_create_table: '18446744073709551615',
      Com_drop_table: '3',
    };
    const run = endedSession(before, { ...before, Com_drop_table: '4' });
    const checked = mysqlOrmMark('Knex', 'k:SUCCESSFUL', mark);

    const opened = await checked.opening(run);
    await expect(checked.mark(opened, run)).rejects.toBeInstanceOf(Landed);
  });

  test('only the counts of statements that never end a transaction moved: retried, not Landed', async () => {
    const before = { Com_commit: '7', Com_rollback: '2', Com_insert: '10', Com_show_status: '4' };
    const run = endedSession(before, { ...before, Com_insert: '11', Com_show_status: '5' });
    const checked = mysqlOrmMark('Knex', 'k:SUCCESSFUL', mark);

    const opened = await checked.opening(run);
    const error = await checked.mark(opened, run).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DeliveryError);
    expect(error).not.toBeInstanceOf(Landed);
  });
});
