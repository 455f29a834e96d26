import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { codeBlocks, documentationFiles } from './quotes.js';

// Every relative link of README.md, CHANGELOG.md and docs/*.md leads to a file that exists and, with an
// `#anchor`, to a heading of that page: a page that moves or a heading renamed cannot leave a dead link.

const root = join(__dirname, '../..');
const files = [...documentationFiles(root), 'CHANGELOG.md'];

/** The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as dashes. */
export function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

/** The text of a page without its code blocks (a link in code is not a link). */
function prose(file: string, markdown: string): string {
  const lines = markdown.split('\n');
  const inCode = new Set<number>();
  for (const block of codeBlocks(file, markdown).blocks) {
    const count = block.text.split('\n').length + 1;
    for (let line = block.line - 1; line < block.line - 1 + count; line += 1) inCode.add(line);
  }
  return lines.filter((_, index) => !inCode.has(index)).join('\n');
}

function anchorsOf(path: string, markdown = readFileSync(join(root, path), 'utf8')): Set<string> {
  const text = prose(path, markdown);
  const anchors = new Set<string>();
  for (const [, heading = ''] of text.matchAll(/^#{1,6} (.+)$/gm)) {
    let name = slug(heading);
    for (let n = 1; anchors.has(name); n += 1) name = `${slug(heading)}-${n}`;
    anchors.add(name);
  }
  return anchors;
}

/** Every broken relative link of `file`, as `file: target (why)`. */
function brokenLinks(file: string, markdown = readFileSync(join(root, file), 'utf8')): string[] {
  const text = prose(file, markdown).replace(/`[^`\n]*`/g, '');
  const broken: string[] = [];
  for (const [, target = ''] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
    if (/^[a-z][a-z+.-]*:/i.test(target)) continue; // https:, mailto:
    const [path = '', anchor] = target.split('#');
    const resolved = path === '' ? file : normalize(join(dirname(file), path));
    if (!existsSync(join(root, resolved))) {
      broken.push(`${file}: ${target} (no file ${resolved})`);
      continue;
    }
    const anchors = path === '' ? anchorsOf(file, markdown) : anchorsOf(resolved);
    if (anchor !== undefined && resolved.endsWith('.md') && !anchors.has(anchor)) {
      broken.push(`${file}: ${target} (no heading #${anchor} in ${resolved})`);
    }
  }
  return broken;
}

/** Where a reader opens the repository's files: the package ships no examples/ (package.json `files`). */
export const REPOSITORY_FILES = 'https://github.com/ipn-kit/ipn-kit/';

/**
 * Every `examples/...` path a reader of `file` sees that they could not open, as `file: path (why)`: the
 * package ships no examples, so a path in prose must be a link to the repository (`blob/main/` for a file,
 * `tree/main/` for a folder) that names a file or folder that exists. Code blocks and the quote markers
 * (HTML comments, never shown) are not read.
 */
function unreachableExamples(file: string, markdown = readFileSync(join(root, file), 'utf8')): string[] {
  let text = prose(file, markdown).replace(/<!--[\s\S]*?-->/g, '');
  const problems: string[] = [];
  const link = /\[((?:[^[\]]|\[[^\]]*\])*)\]\(([^)\s]+)\)/g;
  text = text.replace(link, (whole, label: string, target: string) => {
    const repository = new RegExp(
      `^${REPOSITORY_FILES.replace(/[.]/g, '\\.')}(blob|tree)/main/(examples/[^#?]*)`,
    ).exec(target);
    if (repository) {
      const [, kind = '', path = ''] = repository;
      const full = join(root, path);
      if (!existsSync(full)) problems.push(`${file}: ${target} (no ${path} in the repository)`);
      else if ((kind === 'tree') !== statSync(full).isDirectory())
        problems.push(`${file}: ${target} (${kind === 'tree' ? 'tree/ for a file' : 'blob/ for a folder'})`);
      return '';
    }
    if (/(^|\/)examples\//.test(target))
      problems.push(`${file}: ${target} (a relative link: the package ships no examples)`);
    return label.includes('examples/') ? '' : whole;
  });
  for (const [path = ''] of text.matchAll(/(?<![\w./-])examples\/(?:[\w./*-]*[\w/*])?/g)) {
    const kind = path.endsWith('/') ? 'tree' : 'blob';
    const url = `${REPOSITORY_FILES}${kind}/main/${path.replace(/\/$/, '')}`;
    problems.push(`${file}: ${path} (not a link: write [\`${path}\`](${url}))`);
  }
  return problems;
}

test.each(files)('every examples/ path that %s shows is a link a reader can open', (file) => {
  expect(unreachableExamples(file)).toEqual([]);
});

test('a bare examples/ path, a relative link to one, or a link to a missing file is reported', () => {
  const page = [
    'See `examples/quick-start.ts` and examples/demo.ts.',
    `[\`examples/quick-start.ts\`](${REPOSITORY_FILES}blob/main/examples/quick-start.ts) is fine,`,
    `[the NestJS app](${REPOSITORY_FILES}tree/main/examples/nestjs) too.`,
    `[gone](${REPOSITORY_FILES}blob/main/examples/nope.ts) [rel](../examples/demo.ts)`,
    '<!-- quote: examples/quick-start.ts -->',
    '```ts',
    "import './examples/x.js';",
    '```',
  ].join('\n');
  expect(unreachableExamples('docs/x.md', page)).toEqual([
    `docs/x.md: ${REPOSITORY_FILES}blob/main/examples/nope.ts (no examples/nope.ts in the repository)`,
    'docs/x.md: ../examples/demo.ts (a relative link: the package ships no examples)',
    `docs/x.md: examples/quick-start.ts (not a link: write [\`examples/quick-start.ts\`](${REPOSITORY_FILES}blob/main/examples/quick-start.ts))`,
    `docs/x.md: examples/demo.ts (not a link: write [\`examples/demo.ts\`](${REPOSITORY_FILES}blob/main/examples/demo.ts))`,
  ]);
});

test.each(files)('every relative link of %s leads somewhere', (file) => {
  expect(brokenLinks(file)).toEqual([]);
});

test('a link to a missing page or a missing heading is reported; links in code are not links', () => {
  const page = [
    '[ok](docs/admin.md#options) [ok](#top) [gone](docs/nope.md) [renamed](docs/admin.md#nope)',
    '[web](https://example.com/x) `[code](docs/nope.md)`',
    '# Top',
    '```text',
    '[code](docs/nope.md)',
    '```',
  ].join('\n');
  expect(brokenLinks('README.md', page)).toEqual([
    'README.md: docs/nope.md (no file docs/nope.md)',
    'README.md: docs/admin.md#nope (no heading #nope in docs/admin.md)',
  ]);
});

test('the slug of a heading is the anchor GitHub gives it', () => {
  expect(slug('`ipn-kit inbox`: the PostgreSQL inbox')).toBe('ipn-kit-inbox-the-postgresql-inbox');
  expect(slug('At-most-once or at-least-once')).toBe('at-most-once-or-at-least-once');
  expect(slug("The operator's page")).toBe('the-operators-page');
});
