import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { postgresSchemaSql } from 'ipn-kit/postgres';
import { quotedText } from './quotes.js';

test('examples/postgres-schema.sql, which the docs quote, is what postgresSchemaSql() returns', () => {
  expect(quotedText(join(__dirname, '../..'), 'examples/postgres-schema.sql#schema')).toBe(
    postgresSchemaSql(),
  );
  expect(readFileSync(join(__dirname, '../../examples/postgres-schema.sql'), 'utf8')).toContain(
    '-- #region schema',
  );
});
