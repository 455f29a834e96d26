import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, normalize } from 'node:path';

/**
 * The quote rule of the documentation: every fenced code block in README.md and docs/*.md whose language
 * is ts, tsx, js, mjs, cjs or sql has `<!-- quote: path[#region] -->` on the line before it, and equals that
 * file (or the lines between `// #region name` and `// #endregion name`, `-- ...` in SQL, dedented) exactly.
 */

/** The languages whose blocks must be quotes. */
export const QUOTED_LANGUAGES = ['ts', 'tsx', 'js', 'mjs', 'cjs', 'sql'];

/**
 * The only blocks that need no quote: shell commands, plain text and JSON. Every other block, one in
 * another spelling of a language (`typescript`, `javascript`, `shell`) or with no language at all
 * included, must be a quote, or be given one of these languages: nothing escapes the rule by its label.
 */
export const FREE_LANGUAGES = ['sh', 'text', 'json'];

/** Whether the quote rule applies to `block`. */
export const mustBeQuoted = (block: CodeBlock): boolean => !FREE_LANGUAGES.includes(block.language);

/** One fenced code block of a Markdown file. */
export interface CodeBlock {
  /** The Markdown file, relative to the root. */
  file: string;
  /** 1-based line of the opening fence. */
  line: number;
  language: string;
  /** The lines between the fences, each followed by a newline. */
  text: string;
  /** The quote marker's reference (`path` or `path#region`) on the line before, if any. */
  quote: string | undefined;
}

const MARKER = /^<!-- quote: (\S+) -->$/;

/** The Markdown files the rule covers: README.md and docs/*.md (the generated docs/api/ is not Markdown). */
export function documentationFiles(root: string): string[] {
  const docs = existsSync(join(root, 'docs'))
    ? readdirSync(join(root, 'docs'))
        .filter((name) => name.endsWith('.md'))
        .sort()
        .map((name) => `docs/${name}`)
    : [];
  return ['README.md', ...docs];
}

/** Every fenced block of a Markdown text, and every quote marker that is not followed by a block. */
export function codeBlocks(file: string, markdown: string): { blocks: CodeBlock[]; strayMarkers: number[] } {
  const lines = markdown.split('\n');
  const blocks: CodeBlock[] = [];
  const strayMarkers: number[] = [];
  for (let i = 0; i < lines.length; i += 1) {
    const line = lines[i] ?? '';
    // A fence may be indented (a block inside a list item): its body is then indented as much.
    const fence = /^( *)(```+|~~~+)\s*([\w-]*)/.exec(line);
    if (MARKER.test(line.trim()) && !/^ *(```|~~~)/.test(lines[i + 1] ?? '')) strayMarkers.push(i + 1);
    if (!fence) continue;
    const indent = fence[1]?.length ?? 0;
    const close = fence[2] ?? '```';
    let end = i + 1;
    while (end < lines.length && !(lines[end] ?? '').trimStart().startsWith(close)) end += 1;
    const body = lines
      .slice(i + 1, end)
      .map((text) => text.slice(Math.min(indent, /^ */.exec(text)![0].length)));
    blocks.push({
      file,
      line: i + 1,
      language: (fence[3] ?? '').toLowerCase(),
      text: body.map((text) => `${text}\n`).join(''),
      quote: MARKER.exec((lines[i - 1] ?? '').trim())?.[1],
    });
    i = end;
  }
  return { blocks, strayMarkers };
}

/** Removes the indentation common to every non-blank line. */
export function dedent(lines: string[]): string[] {
  const indents = lines.filter((line) => line.trim() !== '').map((line) => /^ */.exec(line)?.[0].length ?? 0);
  const common = indents.length === 0 ? 0 : Math.min(...indents);
  return lines.map((line) => line.slice(common));
}

const regionLine = (kind: 'region' | 'endregion', name: string) =>
  new RegExp(`^\\s*(//|--) #${kind} ${name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\s*$`);
const ANY_REGION_LINE = /^\s*(\/\/|--) #(end)?region \S+\s*$/;

/**
 * What a quote reference stands for: the file, or its region dedented (region marker lines of other,
 * nested regions left out). Throws an Error saying what is wrong, for a reference that cannot be quoted.
 */
export function quotedText(root: string, reference: string): string {
  const [path = '', region] = reference.split('#');
  const normalized = normalize(path);
  if (!/^(examples|test)\//.test(normalized) || normalized.includes('..')) {
    throw new Error(`${path} is not under examples/ or test/: quote a file that a test runs or type-checks`);
  }
  if (!existsSync(join(root, normalized))) throw new Error(`${path} does not exist`);
  const text = readFileSync(join(root, normalized), 'utf8');
  if (region === undefined) return text;
  const lines = text.split('\n');
  const starts = lines.flatMap((line, i) => (regionLine('region', region).test(line) ? [i] : []));
  const ends = lines.flatMap((line, i) => (regionLine('endregion', region).test(line) ? [i] : []));
  if (starts.length !== 1 || ends.length !== 1) {
    throw new Error(
      `${path} must hold exactly one '// #region ${region}' and one '// #endregion ${region}' ` +
        `('-- #region' in SQL); found ${starts.length} and ${ends.length}`,
    );
  }
  const [start = 0] = starts;
  const [end = 0] = ends;
  if (end < start) throw new Error(`${path}: #endregion ${region} comes before #region ${region}`);
  const body = lines.slice(start + 1, end).filter((line) => !ANY_REGION_LINE.test(line));
  return dedent(body)
    .map((line) => `${line}\n`)
    .join('');
}
