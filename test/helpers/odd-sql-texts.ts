/**
 * Texts that break a statement whose values are spliced into its SQL rather than bound as parameters:
 * quotes, backslashes (with and without `standard_conforming_strings`), placeholders and comments, dollar
 * quoting, characters outside the BMP. Each must come back from the database exactly as sent.
 */
export const ODD_SQL_TEXTS: string[] = [
  "it's",
  "''; DROP TABLE ledger; --",
  'back\\slash \\\\ and \\x27 and \\',
  'a $1 and $2 and ?, ? and :name',
  '$$ dollar $$ and $tag$ quoted $tag$',
  '/* comment */ -- line comment',
  'Ünïcödé, 中文, emoji 🙂, RTL עברית',
  'line\nbreak\tand tab',
  '',
];
