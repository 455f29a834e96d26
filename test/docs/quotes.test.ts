import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { codeBlocks, documentationFiles, mustBeQuoted, quotedText, type CodeBlock } from './quotes.js';

const root = join(__dirname, '../..');
const HOW =
  'Put the code in a file under examples/ (type-checked by `npm run typecheck`; run it from a test where ' +
  'practical) or quote a test, and put `<!-- quote: examples/x.ts -->` (the whole file) or ' +
  '`<!-- quote: examples/x.ts#name -->` (the lines between `// #region name` and `// #endregion name`, ' +
  'dedented) on the line just before the block.';

const all = documentationFiles(root).map((file) => ({
  file,
  ...codeBlocks(file, readFileSync(join(root, file), 'utf8')),
}));
const quotable = all.flatMap(({ blocks }) => blocks.filter(mustBeQuoted));

/** Why a block breaks the quote rule, or undefined when it keeps it. */
function problem(block: CodeBlock): string | undefined {
  const where = `${block.file}:${block.line} (${block.language ? `a ${block.language}` : 'an unlabelled'} block)`;
  if (block.quote === undefined) return `${where} is not a quote of a file that a test runs. ${HOW}`;
  let expected: string;
  try {
    expected = quotedText(root, block.quote);
  } catch (error) {
    return `${where} quotes ${block.quote}, but ${(error as Error).message}. ${HOW}`;
  }
  if (block.text !== expected) {
    return (
      `${where} differs from ${block.quote}: copy the file (or region) into the block as it is, ` +
      `or change the file and copy it again.\n--- the block\n${block.text}--- ${block.quote}\n${expected}`
    );
  }
  return undefined;
}

test('README.md and docs/ have code blocks to check, with the quick start among them', () => {
  expect(
    quotable.some((block) => block.file === 'README.md' && block.quote === 'examples/quick-start.ts'),
  ).toBe(true);
  expect(all.some(({ file }) => file.startsWith('docs/'))).toBe(true);
});

test.each(quotable.map((block) => [`${block.file}:${block.line}`, block] as const))(
  'the code block at %s is a quote of a file a test runs, as it is',
  (_where, block) => {
    expect(problem(block)).toBeUndefined();
  },
);

/** The syntax errors of a ts or tsx block read on its own: a region cut off mid-function has some. */
function syntaxErrors(block: CodeBlock): string[] {
  const kind = block.language === 'tsx' ? ts.ScriptKind.TSX : ts.ScriptKind.TS;
  const source = ts.createSourceFile(`x.${block.language}`, block.text, ts.ScriptTarget.Latest, false, kind);
  const { parseDiagnostics } = source as unknown as { parseDiagnostics: ts.Diagnostic[] };
  return parseDiagnostics.map((d) => ts.flattenDiagnosticMessageText(d.messageText, ' '));
}

test.each(
  quotable
    .filter((block) => block.language === 'ts' || block.language === 'tsx')
    .map((block) => [`${block.file}:${block.line}`, block] as const),
)('the ts block at %s is whole: it parses on its own (a reader can paste it)', (_where, block) => {
  expect(syntaxErrors(block)).toEqual([]);
});

test('a block cut off inside a function is caught', () => {
  const [block] = codeBlocks('x.md', '```ts\nexport function f() {\n  const a = 1;\n```\n').blocks;
  expect(syntaxErrors(block!)).toEqual(["'}' expected."]);
});

test('every quote marker is followed by a code block', () => {
  expect(all.flatMap(({ file, strayMarkers }) => strayMarkers.map((line) => `${file}:${line}`))).toEqual([]);
});

describe('the rule itself', () => {
  const check = (markdown: string) => codeBlocks('x.md', markdown).blocks.filter(mustBeQuoted).map(problem);

  test('a ts block without a marker fails, saying how to fix it', () => {
    expect(check('text\n```ts\nconst a = 1;\n```\n')[0]).toMatch(
      /is not a quote.*<!-- quote: examples\/x\.ts -->/s,
    );
  });

  test('a block that differs from its file fails, showing both', () => {
    expect(check('<!-- quote: examples/quick-start.ts -->\n```ts\nconst a = 1;\n```\n')[0]).toMatch(
      /differs from examples\/quick-start\.ts/,
    );
  });

  test('a quote of a file outside examples/ and test/, or of a missing file or region, fails', () => {
    expect(check('<!-- quote: lib/index.ts -->\n```ts\n```\n')[0]).toMatch(/not under examples\/ or test\//);
    expect(check('<!-- quote: examples/nope.ts -->\n```ts\n```\n')[0]).toMatch(/does not exist/);
    expect(check('<!-- quote: examples/quick-start.ts#nope -->\n```ts\n```\n')[0]).toMatch(/exactly one/);
  });

  test('a block without a language, or labelled typescript or javascript, falls under the rule too', () => {
    const problems = check('```\nconst a = 1;\n```\n```typescript\nconst b = 2;\n```\n```javascript\n```\n');
    expect(problems).toHaveLength(3);
    expect(problems[0]).toMatch(/an unlabelled block\) is not a quote/);
    expect(problems[1]).toMatch(/a typescript block\) is not a quote/);
  });

  test('a block indented inside a list item is checked too, and its quote compared dedented', () => {
    const quick = quotedText(root, 'examples/snippets/verify.ts#verify')
      .split('\n')
      .map((line) => (line ? `   ${line}` : line))
      .join('\n');
    expect(check('- a step:\n   ```ts\n   const a = 1;\n   ```\n')[0]).toMatch(/is not a quote/);
    expect(
      check(
        `- a step:\n   <!-- quote: examples/snippets/verify.ts#verify -->\n   \`\`\`ts\n${quick}   \`\`\`\n`,
      ),
    ).toEqual([undefined]);
  });

  test('a region is the lines between its markers, dedented; sh and json blocks are free', () => {
    const region = quotedText(root, 'examples/snippets/verify.ts#verify');
    expect(region.startsWith('const ipn = ipnRouter(')).toBe(true);
    expect(region).not.toMatch(/#(end)?region/);
    expect(check('```sh\nnpm test\n```\n```json\n{}\n```\n')).toEqual([]);
  });
});
