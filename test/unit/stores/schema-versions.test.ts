import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { mysqlMigrations } from '../../../lib/mysql.js';
import { postgresMigrations } from '../../../lib/postgres.js';
import { sqliteMigrations } from '../../../lib/sqlite.js';

const dialects = { postgres: postgresMigrations, mysql: mysqlMigrations, sqlite: sqliteMigrations };

/**
 * Each released version's SQL, as a digest. A partner's database is at one of these versions, and a tool of
 * theirs may have run its SQL: a released version never changes. To change the schema, add a version at the
 * end of each dialect's list (the same number in every dialect), and its digest here.
 */
const RELEASED: Record<keyof typeof dialects, string[]> = {
  postgres: ['337e03612be82940', 'b454c7afcd0eefcc'],
  mysql: ['addf284c8ac41778', '56a9d69ec3cf42ef'],
  sqlite: ['13ad5507983b5502', '74186079e24882c5'],
};

const digest = (sql: string): string => createHash('sha256').update(sql).digest('hex').slice(0, 16);

test.each(Object.keys(dialects) as Array<keyof typeof dialects>)(
  "%s: a released version's SQL never changes",
  (dialect) => {
    const released = dialects[dialect]('ipn_inbox').slice(0, RELEASED[dialect].length);
    expect(released.map((migration) => digest(migration.sql))).toEqual(RELEASED[dialect]);
  },
);

test('every dialect has the same versions, numbered 1, 2, ... with the same names', () => {
  const [postgres, mysql, sqlite] = Object.values(dialects).map((list) =>
    list('ipn_inbox').map(({ version, name }) => ({
      version,
      name: name.replace(/ \(ipn-kit 0\.1\.0\)$/, ''),
    })),
  );
  expect(postgres!.map((m) => m.version)).toEqual(postgres!.map((_, i) => i + 1));
  expect(mysql).toEqual(postgres);
  expect(sqlite).toEqual(postgres);
});

test("PostgreSQL's version 1 is what ipn-kit 0.1.0 ran (its frozen SQL), then the record of the version", () => {
  const first = readFileSync(join(__dirname, '../../fixtures/schema-0.1.0/postgres-first.sql'), 'utf8');
  const statements = first
    .replace(/^--.*\n/gm, '')
    .split(/;\n/)
    .map((s) => s.trim())
    .filter((s) => s !== '');
  const [one] = postgresMigrations('ipn_inbox');
  expect(one!.statements.slice(0, statements.length)).toEqual(statements);
  expect(one!.statements.slice(statements.length).join('\n')).toMatch(
    /^CREATE TABLE IF NOT EXISTS "ipn_inbox_schema"/,
  );
});

test('each version ends by recording itself, so that migrate() and a tool of your own agree', () => {
  for (const list of Object.values(dialects)) {
    for (const migration of list('shop_inbox')) {
      expect(migration.statements.at(-1)).toMatch(
        new RegExp(`INSERT.*shop_inbox_schema.*VALUES \\(${migration.version}, `),
      );
      expect(migration.sql).toBe(migration.statements.map((s) => `${s};\n`).join(''));
    }
  }
});
