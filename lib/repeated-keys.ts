/**
 * Which of `keys` appear more than once at the top level of a JSON object text. `JSON.parse` silently keeps
 * the last one, so `{"state":"FAILED", ..., "state":"SUCCESSFUL"}` would read as a success: identity fields
 * must be unambiguous. The text must already be known to be valid JSON.
 */
export function repeatedJsonKeys(text: string, keys: readonly string[]): string[] {
  // Fast path: no key quoted twice, and no escape that could spell one (`"st\u0061te"`).
  if (!text.includes('\\') && keys.every((key) => occurrences(text, `"${key}"`) < 2)) return [];
  const seen = new Map<string, number>();
  for (const key of topLevelKeys(text)) seen.set(key, (seen.get(key) ?? 0) + 1);
  return keys.filter((key) => (seen.get(key) ?? 0) > 1);
}

function occurrences(text: string, needle: string): number {
  let count = 0;
  for (let at = text.indexOf(needle); at !== -1 && count < 2; at = text.indexOf(needle, at + 1)) count += 1;
  return count;
}

/** The keys of the outermost object, decoded, in order (duplicates included). */
function topLevelKeys(text: string): string[] {
  const keys: string[] = [];
  let depth = 0;
  for (let i = 0; i < text.length; i += 1) {
    const char = text[i];
    if (char === '"') {
      const start = i;
      for (i += 1; text[i] !== '"'; i += 1) if (text[i] === '\\') i += 1;
      if (depth === 1 && /^\s*:/.test(text.slice(i + 1, i + 40)))
        keys.push(JSON.parse(text.slice(start, i + 1)) as string);
    } else if (char === '{' || char === '[') {
      depth += 1;
    } else if (char === '}' || char === ']') {
      depth -= 1;
    }
  }
  return keys;
}
