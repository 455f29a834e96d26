import { readFile, writeFile } from 'node:fs/promises';
import { format, resolveConfig } from 'prettier';

/** Writes `data` as JSON formatted the way the repository's prettier check wants it. */
export async function writeJson(path: string, data: unknown): Promise<void> {
  const options = (await resolveConfig(path)) ?? {};
  await writeFile(path, await format(JSON.stringify(data), { ...options, filepath: path }));
}

/**
 * Replaces what lies between `<!-- results -->` and `<!-- /results -->` (or another `marker`'s pair) in the
 * Markdown file at `path` with `section`; the hand-written rest of the file is kept. Appends the markers
 * when they are missing.
 */
export async function rewriteSection(path: string, section: string, marker = 'results'): Promise<void> {
  const START = `<!-- ${marker} -->`;
  const END = `<!-- /${marker} -->`;
  const text = await readFile(path, 'utf8').catch(() => '');
  const start = text.indexOf(START);
  const end = text.indexOf(END, start);
  const block = `${START}\n\n${section.trim()}\n\n${END}`;
  const next =
    start === -1 || end === -1
      ? `${text.trimEnd()}\n\n${block}\n`
      : text.slice(0, start) + block + text.slice(end + END.length);
  await writeFile(path, next);
}
