/** One key of the outermost object of a JSON text, and the exact source text of its value. */
export interface JsonEntry {
  key: string;
  value: string;
}

/**
 * The entries of the outermost object of a JSON text, in order, duplicates included, each value as its
 * exact source text. `JSON.parse` silently keeps the last of a repeated key, and rounds numbers it cannot
 * hold: identity fields must be neither ambiguous nor rounded. The text must already be known to be valid
 * JSON (it has been parsed); the cost is one pass over it.
 */
export function jsonEntries(text: string): JsonEntry[] {
  const entries: JsonEntry[] = [];
  let depth = 0;
  let key: string | undefined;
  let valueStart = 0;
  const close = (end: number): void => {
    if (key !== undefined) entries.push({ key, value: text.slice(valueStart, end).trim() });
    key = undefined;
  };
  for (let i = 0; i < text.length; i += 1) {
    const char = text[i];
    if (char === '"') {
      const start = i;
      for (i += 1; text[i] !== '"'; i += 1) if (text[i] === '\\') i += 1;
      if (depth === 1 && key === undefined) {
        let colon = i + 1;
        while (isWhitespace(text[colon])) colon += 1;
        key = JSON.parse(text.slice(start, i + 1)) as string;
        valueStart = colon + 1;
        i = colon;
      }
    } else if (char === '{' || char === '[') {
      depth += 1;
    } else if (char === '}' || char === ']') {
      if (depth === 1) close(i);
      depth -= 1;
    } else if (char === ',' && depth === 1) {
      close(i);
    }
  }
  return entries;
}

/**
 * Which of `keys` appear more than once in the outermost object of a JSON text. Scans only when a key could
 * be repeated: quoted twice, or spelled with a `\u` escape (`"st\u0061te"`). Other escapes (`\"`, `\n`,
 * ...) never decode to the letters and underscores of a key, and real notifications carry them in
 * `custom_data` (JSON inside a string), so they do not make every body take the slow path.
 */
export function repeatedJsonKeys(text: string, keys: readonly string[]): string[] {
  if (!text.includes('\\u') && !quotedTwice(text, keys)) return [];
  const counts = new Map<string, number>();
  for (const { key } of jsonEntries(text)) counts.set(key, (counts.get(key) ?? 0) + 1);
  return keys.filter((key) => (counts.get(key) ?? 0) > 1);
}

/** For each list of keys: a pattern that finds any of them quoted, made once (the router's list is a constant). */
const SCANNERS = new WeakMap<readonly string[], RegExp>();

/**
 * Whether one of `keys` appears quoted (`"state"`) twice or more in `text`: one pass, whatever the number of
 * keys. In valid JSON, two quoted keys of the object never overlap (each follows `{`, `,` or whitespace), so
 * a scan that skips past each match misses none of them.
 */
function quotedTwice(text: string, keys: readonly string[]): boolean {
  if (keys.length === 0) return false;
  let scanner = SCANNERS.get(keys);
  if (scanner === undefined) {
    scanner = new RegExp(
      `"(${keys.map((key) => key.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('|')})"`,
      'g',
    );
    SCANNERS.set(keys, scanner);
  }
  scanner.lastIndex = 0;
  const seen: string[] = [];
  for (let match = scanner.exec(text); match !== null; match = scanner.exec(text)) {
    const key = match[1]!;
    if (seen.includes(key)) return true;
    seen.push(key);
  }
  return false;
}

function isWhitespace(char: string | undefined): boolean {
  return char === ' ' || char === '\n' || char === '\r' || char === '\t';
}
