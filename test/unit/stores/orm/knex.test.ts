import { knexTransactions } from '../../../../lib/orm.js';
import { knexBindings } from '../../../../lib/stores/orm/knex.js';

describe('knexTransactions', () => {
  test.each([
    ['undefined', undefined, /got undefined$/],
    ['a plain object', { transaction() {} }, /got a plain object$/],
    ['the knex factory itself', function knex() {}, /got the function knex \(call the knex function/],
  ])('refuses %s with a TypeError that says what it wants', (_, value, got) => {
    expect(() => knexTransactions(value as never)).toThrow(TypeError);
    expect(() => knexTransactions(value as never)).toThrow(/^knexTransactions: expected a Knex instance/);
    expect(() => knexTransactions(value as never)).toThrow(got);
  });

  test("turns $n into Knex's ? with the values in the order they come, and escapes the SQL's own ?", () => {
    const values = Array.from({ length: 11 }, (_, i) => i + 1);
    expect(knexBindings({ text: "SELECT $2, $1, $2, $11, $10, '?' ?| $3", values, returns: 'rows' })).toEqual(
      {
        sql: "SELECT ?, ?, ?, ?, ?, '\\?' \\?| ?",
        bindings: [2, 1, 2, 11, 10, 3],
      },
    );
  });

  test('passes a text in ? style through as it is, and turns undefined into null', () => {
    expect(knexBindings({ text: 'SELECT ?, ?', values: [1, undefined], returns: 'rows' })).toEqual({
      sql: 'SELECT ?, ?',
      bindings: [1, null],
    });
  });

  test('refuses a $n with no value, and a backslash before a ?', () => {
    expect(() => knexBindings({ text: 'SELECT $2', values: [1], returns: 'rows' })).toThrow(
      /\$2 has no value/,
    );
    expect(() => knexBindings({ text: "SELECT '\\?'", values: [], returns: 'rows' })).toThrow(TypeError);
  });
});
