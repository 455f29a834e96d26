import { randomUUID } from 'node:crypto';
import { Client } from 'pg';
import { asSavepoint } from '../../../lib/stores/postgres/postgres-transaction.js';
import { databaseUrl, describeWithService } from '../../helpers/services.js';

/**
 * `asSavepoint` against PostgreSQL itself: texts made of quotes, comments, dollar quotes and semicolons
 * around a COMMIT (seeded, the same every run). Each text it lets run as it is runs inside a transaction
 * that holds a marker row, then that transaction is rolled back: a marker that survives means the text
 * committed it, which a listener's text must never do. (Against the reading before comments and E''
 * strings were read as PostgreSQL reads them, this finds some 230 such texts.)
 */
const FRAGMENTS = [
  ';/**/COMMIT;SELECT ',
  ';-- c\nCOMMIT;SELECT ',
  ';/* /* */ */ END;SELECT ',
  '; COMMIT; SELECT ',
  ' COMMIT ',
  ' AS a$b$',
  ' AS c$d$',
  "'a'",
  "E'\\''",
  "'\\'",
  "'\\''",
  "E'\\\\'",
  "U&'d'",
  '$$x$$',
  '$a$;$a$',
  '"q"',
  '1',
  '/* c */',
  '-- c\n',
  '/* /* n */ */',
  "'",
  "E'",
  '$$',
  '$a$',
  '/*',
  '*/',
  '--',
  ' AS ',
  ', ',
  '; ',
  '\n',
];

jest.setTimeout(60_000);

describeWithService('PostgreSQL', 'asSavepoint against PostgreSQL', () => {
  const table = `ipn_fuzz_${process.pid}_${randomUUID().slice(0, 8)}`;
  const client = new Client({ connectionString: databaseUrl() });
  const watch = new Client({ connectionString: databaseUrl() });
  beforeAll(async () => {
    await Promise.all([client.connect(), watch.connect()]);
    await watch.query(`CREATE TABLE ${table} (n int)`);
  });
  afterAll(async () => {
    await watch.query(`DROP TABLE IF EXISTS ${table}`);
    await Promise.all([client.end(), watch.end()]);
  });

  test('no text it lets run as it is commits the transaction, whatever standard_conforming_strings', async () => {
    let seed = 42;
    const next = (n: number): number => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed % n;
    };
    const committed: string[] = [];
    for (let sample = 0; sample < 3000; sample += 1) {
      const parts = Array.from({ length: 2 + next(8) }, () => FRAGMENTS[next(FRAGMENTS.length)]!);
      const text = (next(2) === 1 ? 'SELECT ' : '') + parts.join('');
      const strings = next(2) === 1 ? 'on' : 'off';
      try {
        if (asSavepoint(text, 0, 'k') !== undefined) continue; // a savepoint: never a commit
      } catch {
        continue; // refused: never run
      }
      await client.query('BEGIN');
      await client.query(`SET LOCAL standard_conforming_strings = ${strings}`);
      await client.query(`INSERT INTO ${table} VALUES ($1)`, [sample]);
      await client.query(text).catch(() => {}); // a text PostgreSQL cannot read runs nothing
      await client.query('ROLLBACK');
      const { rowCount } = await watch.query(`SELECT 1 FROM ${table} WHERE n = $1`, [sample]);
      if (rowCount !== 0) committed.push(`${strings}: ${JSON.stringify(text)}`);
    }
    expect(committed).toEqual([]);
  });
});
