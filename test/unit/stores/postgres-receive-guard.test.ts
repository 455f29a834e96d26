import { inboxSql } from '../../../lib/stores/postgres/postgres-sql.js';

/**
 * The receives under READ COMMITTED, PostgreSQL's default and the hot path: each statement is the one sent
 * after the lock (under another isolation) with the guard alone added, a one-time filter. A statement
 * wrapped to answer its refusal as a row (a CTE, a UNION) cost a single receive about a third more of
 * PostgreSQL's time (planning and execution, EXPLAIN ANALYZE), for every payment.
 */
describe('the guarded receive statements', () => {
  const GUARD =
    "1 / (CASE WHEN current_setting('transaction_isolation') IN ('read committed', 'read uncommitted') THEN 1 ELSE 0 END) = 1 AND ";
  const sql = inboxSql('app.ipn_inbox');

  test.each(['receive', 'receiveMany', 'receiveAndDeliverMany'] as const)(
    '%s is its locked statement plus the guard, nothing else',
    (kind) => {
      expect(sql[kind]).toContain(GUARD);
      expect(sql[kind].replaceAll(GUARD, '')).toBe(sql.locked[kind]);
    },
  );

  test('a single receive is answered by its count: no RETURNING, no CTE', () => {
    expect(sql.receive).toMatch(/^INSERT INTO/);
    expect(sql.receive).not.toMatch(/RETURNING|WITH|UNION/);
  });
});
