import { mysqlMigrations } from '../../../lib/stores/mysql/mysql-schema.js';

// MySQL 8 names a CHECK within the database, not the table (`Duplicate check constraint name`): version 5's
// `<table>_no_sweep_lock` (on `<table>_expected`, cut at 55) and version 7's `<table>_no_claim_marker` (on
// the inbox), cut to 64 bytes, must differ for two inboxes whose names differ after their first 50 (48)
// bytes, or the second one's migrate() fails at that version for good.
test.each([
  { version: 5, suffix: '_no_sweep_lock', same: 50 },
  { version: 7, suffix: '_no_claim_marker', same: 48 },
])(
  "version $version's CHECK names differ for two long inbox names that differ after their first $same bytes",
  ({ version, suffix, same }) => {
    const stem = 'q'.repeat(same);
    const checkOf = (table: string) => {
      const sql = mysqlMigrations(table).find((each) => each.version === version)!.sql;
      return /ADD CONSTRAINT `([^`]+)`/.exec(sql)![1]!;
    };
    const first = checkOf(`${stem}A_one_x`);
    const second = checkOf(`${stem}B_two_x`);
    expect(first.length).toBeLessThanOrEqual(64);
    expect(second.length).toBeLessThanOrEqual(64);
    expect(first).not.toBe(second);
    // A name that fits is as it was.
    expect(checkOf('ipn_inbox')).toBe(`ipn_inbox${suffix}`);
  },
);
