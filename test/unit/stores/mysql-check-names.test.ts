import { mysqlMigrations } from '../../../lib/stores/mysql/mysql-schema.js';

// MySQL 8 names a CHECK within the database, not the table (`Duplicate check constraint name`): version 5's
// `<table>_no_sweep_lock`, cut to 64 bytes, must differ for two inboxes whose names differ after 50 bytes
// (their `<table>_expected`, cut at 55, differ), or the second one's migrate() fails at version 5 for good.
test("version 5's CHECK names differ for two long inbox names that differ after their first 50 bytes", () => {
  const stem = 'q'.repeat(50);
  const checkOf = (table: string) => {
    const sql = mysqlMigrations(table).find((each) => each.version === 5)!.sql;
    return /ADD CONSTRAINT `([^`]+)`/.exec(sql)![1]!;
  };
  const first = checkOf(`${stem}A_one_x`);
  const second = checkOf(`${stem}B_two_x`);
  expect(first.length).toBeLessThanOrEqual(64);
  expect(second.length).toBeLessThanOrEqual(64);
  expect(first).not.toBe(second);
  // A name that fits is as it was.
  expect(checkOf('ipn_inbox')).toBe('ipn_inbox_no_sweep_lock');
});

// Version 7's `<table>_no_claim_marker` on the inbox: the same rule, for two inboxes whose names differ after
// 48 bytes (their inboxes, and their `<table>_claims` cut at 57, differ).
test("version 7's CHECK names differ for two long inbox names that differ after their first 48 bytes", () => {
  const stem = 'q'.repeat(48);
  const checkOf = (table: string) => {
    const sql = mysqlMigrations(table).find((each) => each.version === 7)!.sql;
    return /ADD CONSTRAINT `([^`]+)`/.exec(sql)![1]!;
  };
  const first = checkOf(`${stem}A_one_x`);
  const second = checkOf(`${stem}B_two_x`);
  expect(first.length).toBeLessThanOrEqual(64);
  expect(second.length).toBeLessThanOrEqual(64);
  expect(first).not.toBe(second);
  expect(checkOf('ipn_inbox')).toBe('ipn_inbox_no_claim_marker');
});
