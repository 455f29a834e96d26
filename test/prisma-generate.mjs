// Generates the Prisma clients that the tests and examples import, from their schema.prisma, into the
// gitignored folder each schema names: generated code is never committed, so it cannot drift from the
// installed Prisma. Run by jest's globalSetup and before lint and typecheck (they read its types); a client
// whose schema and Prisma version are unchanged since it was generated is kept (a few milliseconds).
//
// Offline: the Prisma CLI downloads its schema engine (a native binary, for migrate and db push) from
// binaries.prisma.sh at startup, whatever the command, and this machine may reach only the npm registry.
// `generate` never runs that engine (it reads the schema with the WebAssembly build bundled in the CLI), so
// PRISMA_SCHEMA_ENGINE_BINARY points at a placeholder file: Prisma only checks that the file exists.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(import.meta.url);

/** Each schema, and where its generator's `output` puts the client (relative to the schema). */
const SCHEMAS = [
  { schema: 'test/fixtures/orm/prisma/schema.prisma', output: 'test/fixtures/orm/prisma/generated' },
  { schema: 'examples/prisma/schema.prisma', output: 'examples/prisma/generated' },
  { schema: 'examples/nextjs/prisma/schema.prisma', output: 'examples/nextjs/prisma/generated' },
];

const STAMP = '.ipn-kit-stamp';
/** A lock older than this was left by a process that died while generating. */
const STALE_LOCK_MS = 120_000;

/** What a generated client is made from: its schema and the Prisma version. */
function stampOf(schemaPath) {
  const version = JSON.parse(readFileSync(require.resolve('prisma/package.json'), 'utf8')).version;
  return createHash('sha256').update(version).update(readFileSync(schemaPath)).digest('hex');
}

function upToDate(output, stamp) {
  const file = join(output, STAMP);
  return existsSync(file) && readFileSync(file, 'utf8') === stamp;
}

function sleep(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/**
 * Takes the lock of `output` (a directory: mkdir is atomic), so that two commands started at once (lint
 * beside typecheck, two jest runs) never generate into the same folder together. Returns false when another
 * process generated the client while this one waited.
 */
function lock(lockDir, output, stamp) {
  for (;;) {
    try {
      mkdirSync(lockDir);
      return true;
    } catch (error) {
      if (error.code !== 'EEXIST') throw error;
    }
    if (upToDate(output, stamp)) return false;
    try {
      if (Date.now() - statSync(lockDir).mtimeMs > STALE_LOCK_MS)
        rmSync(lockDir, { recursive: true, force: true });
    } catch {
      // removed by its owner meanwhile
    }
    sleep(100);
  }
}

function placeholderEngine() {
  const file = join(root, 'node_modules/.cache/ipn-kit/no-schema-engine');
  if (!existsSync(file)) {
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(
      file,
      'a placeholder: prisma generate never runs the schema engine (see test/prisma-generate.mjs)\n',
    );
  }
  return file;
}

/** Generates every client that is missing or out of date. */
export default function generatePrismaClients() {
  for (const { schema, output: relative } of SCHEMAS) {
    const schemaPath = join(root, schema);
    const output = join(root, relative);
    const stamp = stampOf(schemaPath);
    if (upToDate(output, stamp)) continue;
    const lockDir = `${output}.lock`;
    if (!lock(lockDir, output, stamp)) continue;
    try {
      if (upToDate(output, stamp)) continue;
      execFileSync(
        process.execPath,
        [require.resolve('prisma/build/index.js'), 'generate', '--schema', schemaPath],
        {
          cwd: root,
          stdio: 'pipe', // its output is in the error when it fails
          env: {
            ...process.env,
            PRISMA_SCHEMA_ENGINE_BINARY: process.env.PRISMA_SCHEMA_ENGINE_BINARY || placeholderEngine(),
            CHECKPOINT_DISABLE: '1', // no update check over the network
            PRISMA_HIDE_UPDATE_MESSAGE: '1',
          },
        },
      );
      writeFileSync(join(output, STAMP), stamp); // last: a half-generated client has no stamp
    } finally {
      rmSync(lockDir, { recursive: true, force: true });
    }
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) generatePrismaClients();
