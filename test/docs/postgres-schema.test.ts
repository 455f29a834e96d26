import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { postgresMigrations, postgresSchemaSql } from 'ipn-kit/postgres';
import { quotedText } from './quotes.js';

test('examples/postgres-schema.sql, which the docs quote, is what postgresSchemaSql() returns', () => {
  expect(quotedText(join(__dirname, '../..'), 'examples/postgres-schema.sql#schema')).toBe(
    postgresSchemaSql(),
  );
  expect(readFileSync(join(__dirname, '../../examples/postgres-schema.sql'), 'utf8')).toContain(
    '-- #region schema',
  );
});

test("docs/cli.md's sample `ipn-kit migrate` run lists every version, in order, and ends at the latest", () => {
  const cli = readFileSync(join(__dirname, '../../docs/cli.md'), 'utf8');
  const migrations = postgresMigrations();
  const ran = migrations.map(({ version, name }) => `# ran version ${version}: ${name}`).join('\n');
  const latest = migrations[migrations.length - 1]!.version;
  expect(cli).toContain(`${ran}\n# ipn_inbox: schema version ${latest} (the latest)`);
});
