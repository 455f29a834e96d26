/** The characters that open a quoted part of MySQL's SQL: a string (`'`, `"`) or an identifier (`` ` ``). */
const QUOTES = new Set(["'", '"', '`']);

/**
 * `text` with `replace` applied to each `?` inside a quoted part (`'...'`, `"..."`, `` `...` ``), where it is
 * no placeholder: the `?` outside them are the placeholders of a MySQL (or SQLite) statement. A quote
 * doubled inside its part (`'it''s'`) and a character after a backslash (`'it\'s'`, MySQL's default) stay
 * inside it.
 */
export function replaceQuotedMarks(text: string, replace: string): string {
  let out = '';
  let quote: string | undefined; // the quote of the part we are in
  for (let i = 0; i < text.length; i += 1) {
    const char = text[i]!;
    if (quote === undefined) {
      if (QUOTES.has(char)) quote = char;
    } else if (char === '\\' && quote !== '`') {
      out += char + (text[i + 1] ?? '');
      i += 1;
      continue;
    } else if (char === quote) {
      quote = undefined;
    } else if (char === '?') {
      out += replace;
      continue;
    }
    out += char;
  }
  return out;
}
