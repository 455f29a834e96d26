import { replaceQuotedMarks } from '../../../../lib/stores/orm/sql-literals.js';

describe('replaceQuotedMarks', () => {
  test('replaces the ? inside quoted strings and identifiers, never a placeholder outside them', () => {
    expect(replaceQuotedMarks('SELECT ?, \'a?\', "b?", `c?` WHERE x IN (?)', '#')).toBe(
      'SELECT ?, \'a#\', "b#", `c#` WHERE x IN (?)',
    );
  });

  test('a doubled quote and a backslashed one stay inside their string', () => {
    expect(replaceQuotedMarks("'it''s ?' ? 'it\\'s ?' ?", '#')).toBe("'it''s #' ? 'it\\'s #' ?");
    expect(replaceQuotedMarks('"say ""?""" ?', '#')).toBe('"say ""#""" ?');
  });

  test('a quote of one kind inside a string of another opens nothing', () => {
    expect(replaceQuotedMarks('\'"\' ? "\'" ?', '#')).toBe('\'"\' ? "\'" ?');
  });

  test('a text without quotes comes back as it is', () => {
    expect(replaceQuotedMarks('UPDATE t SET a = ? WHERE b = ?', '#')).toBe('UPDATE t SET a = ? WHERE b = ?');
  });
});
