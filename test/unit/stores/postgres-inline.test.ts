import { inline } from '../../../lib/stores/postgres/postgres-sql.js';

/** `inline`: a receive's `$n` values as the literals of a simple query (see `#insert` of PostgresStore). */
describe('inline', () => {
  test('puts each value in place of its $n as a literal, in one pass: a $n inside a value stays as it is', () => {
    const text = 'SELECT $1::text, $2::double precision, $3::text[], $4::text, $1 = $10';
    const values = ["it's \\ $2", 1.5, ['a', "b'$1"], null, 0, 0, 0, 0, 0, -3];
    expect(inline(text, values)).toBe(
      "SELECT E'it''s \\\\ $2'::text, E'1.5'::double precision, ARRAY[E'a', E'b''$1']::text[], NULL::text, E'it''s \\\\ $2' = E'-3'",
    );
    expect(inline('SELECT $1::text[]', [[]])).toBe('SELECT ARRAY[]::text[]');
  });

  test.each([
    ['a NUL in a string', ['a\u0000b']],
    ['a number that is not finite', [Number.NaN]],
    ['an object', [{}]],
    ['undefined', [undefined]],
    ['no value for its $n', []],
  ])('refuses %s (a TypeError: the store never sends it)', (_what, values) => {
    expect(() => inline('SELECT $1', values)).toThrow(TypeError);
  });
});
