// Packaging test: builds the npm tarball, installs it in a scratch project, and checks that `require`,
// `import` and the type declarations of both all work from the outside, as a user gets them.
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, posix, resolve } from 'node:path';

const root = resolve(import.meta.dirname, '../..');
const scratch = mkdtempSync(join(tmpdir(), 'ipn-kit-package-'));
const results = [];

function run(command, args, cwd) {
  return execFileSync(command, args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

function check(name, fn) {
  try {
    fn();
    results.push({ name, ok: true });
    console.log(`  ok    ${name}`);
  } catch (error) {
    results.push({ name, ok: false });
    console.log(
      `  FAIL  ${name}\n${String(error.stdout ?? '')}${String(error.stderr ?? '')}${error.message}`,
    );
  }
}

// What a user runs: a request to the installed router, through node:http, in each module system.
const probe = (load) => `${load}
const { createServer } = require_or_import_http;
const ipn = ipnRouter();
let events = 0;
ipn.on('successful', () => { events += 1; });
const server = createServer(ipn).listen(0, '127.0.0.1', async () => {
  const url = 'http://127.0.0.1:' + server.address().port + '/';
  const body = JSON.stringify({ transaction_id: 'EFB.001158', state: 'SUCCESSFUL', custom_data: 'o-1', comission: '5' });
  const first = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  const again = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  server.close();
  if (first.status !== 200 || again.status !== 200 || events !== 1 || typeof MemoryStore !== 'function') {
    console.error('unexpected', first.status, again.status, events);
    process.exit(1);
  }
});
`;

try {
  console.log(`packaging test in ${scratch}`);
  const [{ filename, files }] = JSON.parse(
    run('npm', ['pack', '--json', '--pack-destination', scratch], root),
  );
  const tarball = join(scratch, filename);

  check('the tarball holds the built library and no sources or tests', () => {
    const paths = files.map((file) => file.path);
    for (const expected of [
      'package.json',
      'README.md',
      'LICENSE',
      'CHANGELOG.md',
      'dist/cjs/index.js',
      'dist/cjs/index.d.ts',
      'dist/esm/index.js',
      'dist/esm/index.d.ts',
      ...['redis', 'postgres', 'mysql', 'sqlite', 'testing', 'prometheus', 'admin', 'fastify', 'orm'].flatMap(
        (entry) => [`dist/cjs/${entry}.js`, `dist/esm/${entry}.js`, `dist/cjs/${entry}.d.ts`],
      ),
      'dist/cjs/cli.js',
    ]) {
      if (!paths.includes(expected)) throw new Error(`missing ${expected}`);
    }
    const stray = paths.filter(
      (path) => /^(lib|test|examples)\//.test(path) || path.endsWith('.tsbuildinfo'),
    );
    if (stray.length > 0) throw new Error(`should not ship: ${stray.join(', ')}`);
  });

  check('every relative link of the README and the docs pages points to a file the tarball holds', () => {
    const paths = new Set(files.map((file) => file.path));
    const pages = [...paths].filter((path) => path.endsWith('.md'));
    const broken = [];
    for (const page of pages) {
      const text = readFileSync(join(root, page), 'utf8');
      for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        if (/^[a-z]+:/i.test(target) || target.startsWith('#')) continue;
        const path = posix.normalize(posix.join(posix.dirname(page), target.split('#')[0]));
        if (!paths.has(path)) broken.push(`${page}: ${target}`);
      }
    }
    if (broken.length > 0) throw new Error(`links to files the tarball does not hold:\n${broken.join('\n')}`);
  });

  check('the tarball holds the API reference the README points to, and its pages link only within it', () => {
    const paths = new Set(files.map((file) => file.path));
    const where = 'node_modules/ipn-kit/docs/api/index.html';
    for (const page of ['README.md', 'docs/README.md']) {
      if (!readFileSync(join(root, page), 'utf8').replace(/\s+/g, ' ').includes(where))
        throw new Error(`${page} does not say where the API reference is (${where})`);
    }
    // The front page lists the entry points; ipnRouter's page documents it.
    const pages = {
      'docs/api/index.html': 'modules/redis.html',
      'docs/api/functions/index.ipnRouter.html': 'ipnRouter',
    };
    for (const [page, expected] of Object.entries(pages)) {
      if (!paths.has(page)) throw new Error(`missing ${page}`);
      const html = readFileSync(join(root, page), 'utf8');
      if (!html.includes(expected)) throw new Error(`${page} does not hold ${expected}`);
      const broken = [];
      for (const [, target] of html.matchAll(/(?:href|src)="([^"#?]+)[^"]*"/g)) {
        if (/^[a-z]+:/i.test(target)) continue;
        const path = posix.normalize(posix.join(posix.dirname(page), target));
        if (!paths.has(path)) broken.push(target);
      }
      if (broken.length > 0) throw new Error(`${page} links to files the tarball does not hold: ${broken}`);
    }
  });

  check('package.json names the repository, the home page and where to report bugs', () => {
    const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
    const repository = 'https://github.com/ipn-kit/ipn-kit';
    if (manifest.repository?.url !== `git+${repository}.git`) throw new Error('repository.url');
    if (manifest.homepage !== `${repository}#readme`) throw new Error('homepage');
    if (manifest.bugs?.url !== `${repository}/issues`) throw new Error('bugs.url');
    if (manifest.license !== 'MIT') throw new Error('license');
  });

  const app = join(scratch, 'app');
  execFileSync('mkdir', ['-p', app]);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'scratch-app', private: true }));
  run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', tarball], app);

  check('require("ipn-kit") works from CommonJS', () => {
    writeFileSync(
      join(app, 'probe.cjs'),
      probe(
        "const { ipnRouter, MemoryStore } = require('ipn-kit');\nconst require_or_import_http = require('node:http');",
      ),
    );
    run('node', ['probe.cjs'], app);
  });

  check('import "ipn-kit" works from ESM', () => {
    writeFileSync(
      join(app, 'probe.mjs'),
      probe(
        "import { ipnRouter, MemoryStore } from 'ipn-kit';\nimport * as require_or_import_http from 'node:http';",
      ),
    );
    run('node', ['probe.mjs'], app);
  });

  check(
    'the Redis, PostgreSQL, SQLite and testing entry points load, with no database driver installed',
    () => {
      writeFileSync(
        join(app, 'entries.cjs'),
        `const { RedisStore } = require('ipn-kit/redis');
const { PostgresStore, postgresSchemaSql } = require('ipn-kit/postgres');
const { MysqlStore, mysqlSchemaSql } = require('ipn-kit/mysql');
const { createFakeProvider } = require('ipn-kit/testing');
if (typeof RedisStore !== 'function' || typeof PostgresStore !== 'function') process.exit(1);
if (!postgresSchemaSql('ipn_inbox').includes('ipn_inbox') || typeof createFakeProvider !== 'function') process.exit(1);
if (typeof MysqlStore !== 'function' || !mysqlSchemaSql('ipn_inbox').includes('ipn_inbox')) process.exit(1);
const { SqliteStore, sqliteSchemaSql } = require('ipn-kit/sqlite');
if (typeof SqliteStore !== 'function' || !sqliteSchemaSql('ipn_inbox').includes('ipn_inbox')) process.exit(1);
`,
      );
      run('node', ['entries.cjs'], app);
    },
  );

  check('ipn-kit/admin loads from CommonJS and ESM, and refuses to be created without authorize', () => {
    writeFileSync(
      join(app, 'admin.cjs'),
      `const { adminRouter } = require('ipn-kit/admin');
const { ipnRouter } = require('ipn-kit');
try { adminRouter({ ipn: ipnRouter() }); process.exit(1); } catch (error) { if (!(error instanceof TypeError)) process.exit(1); }
if (typeof adminRouter({ ipn: ipnRouter(), authorize: () => false }) !== 'function') process.exit(1);`,
    );
    run('node', ['admin.cjs'], app);
    writeFileSync(
      join(app, 'admin.mjs'),
      "import { adminRouter } from 'ipn-kit/admin';\nif (typeof adminRouter !== 'function') process.exit(1);",
    );
    run('node', ['admin.mjs'], app);
  });

  check('the testing kit plays the service for a router and a status client, from ESM', () => {
    writeFileSync(
      join(app, 'kit.mjs'),
      `import { createServer } from 'node:http';
import { ipnRouter, createStatusClient } from 'ipn-kit';
import { createFakeProvider } from 'ipn-kit/testing';
const provider = await createFakeProvider({ apiKey: 'key' });
// An unknown id is believed forged once the service says so twice, minIntervalMs apart: short waits here.
const client = createStatusClient({ baseUrl: provider.statusBaseUrl, apiKey: 'key', minIntervalMs: 50 });
const ipn = ipnRouter({ verify: client, verifyRetryDelayMs: 20 });
const events = [];
ipn.on('successful', (n) => events.push(n.custom_data));
ipn.on('rejected', (e) => events.push('rejected:' + e.reason));
const server = createServer(ipn);
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const ipnUrl = 'http://127.0.0.1:' + server.address().port + '/';
await provider.initiate({ amount: 100, ipnUrl, customData: 'order-1', outcome: 'SUCCESSFUL' }).delivered;
await provider.forge({ ipnUrl, customData: 'order-2' });
for (let i = 0; i < 500 && events.length < 2; i += 1) await new Promise((r) => setTimeout(r, 10));
server.close();
await provider.close();
if (events.join() !== 'order-1,rejected:not_found') { console.error(events); process.exit(1); }
`,
    );
    run('node', ['kit.mjs'], app);
  });

  check('ipn-kit/fastify loads from CommonJS and ESM with no Fastify installed', () => {
    writeFileSync(
      join(app, 'fastify-entry.cjs'),
      `const { ipnPlugin } = require('ipn-kit/fastify');
if (typeof ipnPlugin !== 'function') process.exit(1);`,
    );
    run('node', ['fastify-entry.cjs'], app);
    writeFileSync(
      join(app, 'fastify-entry.mjs'),
      "import { ipnPlugin } from 'ipn-kit/fastify';\nif (typeof ipnPlugin !== 'function') process.exit(1);",
    );
    run('node', ['fastify-entry.mjs'], app);
  });

  check('the core pulls in no database driver and no framework', () => {
    const installed = readdirSync(join(app, 'node_modules'));
    const unwanted = [
      'ioredis',
      'redis',
      'pg',
      '@redis',
      'fastify',
      'next',
      'react',
      'hono',
      '@hono',
      '@nestjs',
    ];
    const found = installed.filter((name) => unwanted.includes(name));
    if (found.length > 0) throw new Error(`installed with ipn-kit: ${found.join(', ')}`);
  });

  check(
    'ipn-kit/fastify serves a notification in a real Fastify app (the ESM build with a CommonJS router)',
    () => {
      // The user's Fastify: ours, linked in (Node resolves its own dependencies from where it really is).
      mkdirSync(join(app, 'node_modules'), { recursive: true });
      symlinkSync(join(root, 'node_modules/fastify'), join(app, 'node_modules/fastify'), 'dir');
      writeFileSync(
        join(app, 'fastify-app.mjs'),
        `import Fastify from 'fastify';
import { createRequire } from 'node:module';
import { ipnPlugin } from 'ipn-kit/fastify';
const { ipnRouter } = createRequire(import.meta.url)('ipn-kit');
const ipn = ipnRouter();
let events = 0;
ipn.on('successful', () => { events += 1; });
const fastify = Fastify();
fastify.addContentTypeParser('text/plain', (_req, _payload, done) => done(new Error('host parser')));
await fastify.register(ipnPlugin, { prefix: '/ipn', router: ipn });
const url = (await fastify.listen({ port: 0, host: '127.0.0.1' })) + '/ipn';
const body = JSON.stringify({ transaction_id: 'EFB.001158', state: 'SUCCESSFUL', custom_data: 'o-1' });
const first = await fetch(url, { method: 'POST', headers: { 'content-type': 'text/plain' }, body });
const again = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
await fastify.close();
if (first.status !== 200 || again.status !== 200 || events !== 1) {
  console.error('unexpected', first.status, again.status, events);
  process.exit(1);
}
`,
      );
      run('node', ['fastify-app.mjs'], app);
    },
  );

  check('npx ipn-kit runs the CLI', () => {
    const help = run(join(app, 'node_modules/.bin/ipn-kit'), ['--help'], app);
    if (!help.includes('ipn-kit send <url>')) throw new Error(`unexpected help:\n${help}`);
    const version = run(join(app, 'node_modules/.bin/ipn-kit'), ['--version'], app).trim();
    const { version: expected } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
    if (version !== expected) throw new Error(`--version printed ${version}, not ${expected}`);
  });

  check(
    'types resolve for both require (.cts) and import (.mts) under node16 resolution, with no global types',
    () => {
      const source = `import { ipnRouter, MemoryStore, createStatusClient, type IpnNotification } from 'ipn-kit';
import { RedisStore } from 'ipn-kit/redis';
import { PostgresStore } from 'ipn-kit/postgres';
import { createFakeProvider } from 'ipn-kit/testing';
import type { IpnPluginOptions } from 'ipn-kit/fastify';
export const pluginOptions: IpnPluginOptions | undefined = undefined;
export const handle = (request: Request): Promise<Response> => ipnRouter().fetch(request, { waitUntil: () => {} });
export const stores = [RedisStore, PostgresStore, createFakeProvider, createStatusClient];
const ipn = ipnRouter({ store: new MemoryStore() });
ipn.on('successful', (n) => { const state: 'SUCCESSFUL' = n.state; const amount: number | null = n.amount; void [state, amount]; });
// @ts-expect-error no such event
ipn.on('paid', () => {});
export const notification: IpnNotification | undefined = undefined;
`;
      writeFileSync(join(app, 'check.cts'), source);
      writeFileSync(join(app, 'check.mts'), source);
      writeFileSync(
        join(app, 'tsconfig.json'),
        JSON.stringify({
          compilerOptions: {
            module: 'node16',
            moduleResolution: 'node16',
            strict: true,
            noEmit: true,
            skipLibCheck: false,
            typeRoots: [join(root, 'node_modules/@types')],
            // No global types, as TypeScript 6+ defaults to: the declarations must pull in Node's themselves.
            types: [],
          },
          files: ['check.cts', 'check.mts'],
        }),
      );
      run(join(root, 'node_modules/.bin/tsc'), ['-p', app], app);
    },
  );

  check(
    'subpath types resolve under moduleResolution node10 (the NestJS default), through typesVersions',
    () => {
      const dir = join(app, 'node10');
      mkdirSync(dir, { recursive: true });
      writeFileSync(
        join(dir, 'check.ts'),
        `import { ipnRouter, type IpnNotification } from 'ipn-kit';
import { RedisStore, redisGuard } from 'ipn-kit/redis';
import { PostgresStore, postgresSchemaSql } from 'ipn-kit/postgres';
import { createFakeProvider, type FakeProvider } from 'ipn-kit/testing';
import { registerIpnMetrics } from 'ipn-kit/prometheus';
import { adminRouter } from 'ipn-kit/admin';
const sql: string = postgresSchemaSql('ipn_inbox');
export const used = [ipnRouter, RedisStore, redisGuard, PostgresStore, registerIpnMetrics, adminRouter, sql];
export const provider: Promise<FakeProvider> = createFakeProvider({ apiKey: 'key' });
// Real types, not any: each of these is an error.
// @ts-expect-error apiKey is required
void createFakeProvider({});
// @ts-expect-error adminRouter needs its options
void adminRouter();
// @ts-expect-error postgresSchemaSql takes a table name
void postgresSchemaSql(1);
export const notification: IpnNotification | undefined = undefined;
`,
      );
      writeFileSync(
        join(dir, 'tsconfig.json'),
        JSON.stringify({
          compilerOptions: {
            module: 'commonjs',
            moduleResolution: 'node10',
            target: 'es2022',
            strict: true,
            noEmit: true,
            esModuleInterop: true,
            skipLibCheck: true,
            typeRoots: [join(root, 'node_modules/@types')],
            types: ['node'],
          },
          files: ['check.ts'],
        }),
      );
      run(join(root, 'node_modules/.bin/tsc'), ['-p', dir], dir);
    },
  );

  check('the published declarations keep the TSDoc of every notification field', () => {
    const ts = createRequire(import.meta.url)('typescript');
    const file = join(app, 'fields.ts');
    writeFileSync(
      file,
      "import type { IpnNotification } from 'ipn-kit';\nexport type N = IpnNotification;\n",
    );
    const program = ts.createProgram([file], {
      module: ts.ModuleKind.Node16,
      moduleResolution: ts.ModuleResolutionKind.Node16,
      strict: true,
      noEmit: true,
      types: [],
    });
    const checker = program.getTypeChecker();
    const alias = program.getSourceFile(file).statements.find((node) => ts.isTypeAliasDeclaration(node));
    const fields = checker.getTypeAtLocation(alias.name).getProperties();
    if (fields.length < 24) throw new Error(`IpnNotification has ${fields.length} fields, expected 24`);
    const bare = fields.filter(
      (field) => ts.displayPartsToString(field.getDocumentationComment(checker)) === '',
    );
    if (bare.length > 0)
      throw new Error(`no TSDoc in the declarations: ${bare.map((f) => f.name).join(', ')}`);
  });

  check(
    'every ts block of README.md and docs/ compiles against the package: nodenext strict, commonjs, bundler',
    () => {
      compileSnippets(app);
    },
  );
} catch (error) {
  results.push({ name: 'setup', ok: false });
  console.log(`  FAIL  setup\n${String(error.stderr ?? '')}${error.message}`);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}

/** The files the README's and docs' ts blocks quote (`<!-- quote: path[#region] -->`), as root-relative paths. */
function quotedTsFiles() {
  const documents = [
    'README.md',
    ...readdirSync(join(root, 'docs'))
      .filter((name) => name.endsWith('.md'))
      .map((name) => `docs/${name}`),
  ];
  const files = new Set();
  for (const document of documents) {
    const lines = readFileSync(join(root, document), 'utf8').split('\n');
    lines.forEach((line, i) => {
      const marker = /^<!-- quote: (\S+) -->$/.exec(line);
      if (marker && /^(```|~~~)\s*(ts|tsx|mts|cts)\s*$/.test(lines[i + 1] ?? ''))
        files.add(marker[1].split('#')[0]);
    });
  }
  return [...files].sort();
}

/** A quoted file and every file it imports by a relative path, copied at the same paths under `to`. */
function copyWithImports(file, to, copied = new Set(), from = 'the docs') {
  if (copied.has(file)) return;
  // A user has the package, never its sources: a snippet that reaches them compiles here against lib/ under
  // the app's settings and proves nothing about what a user can write.
  if (file.split(/[\\/]/)[0] === 'lib')
    throw new Error(`${from} imports ${file} by a relative path: a quoted file must import ipn-kit by name`);
  copied.add(file);
  mkdirSync(dirname(join(to, file)), { recursive: true });
  cpSync(join(root, file), join(to, file));
  const text = readFileSync(join(root, file), 'utf8');
  // Either quote: a generated Prisma client, which a snippet imports, writes its imports with double ones;
  // without them its client.ts compiles alone, and every model's type is `any`, so nothing is checked.
  for (const [, specifier] of text.matchAll(/from ['"](\.{1,2}\/[^'"]+)['"]/g)) {
    const target = join(dirname(file), specifier.replace(/\.js$/, '.ts'));
    if (existsSync(join(root, target))) copyWithImports(target, to, copied, file);
  }
}

/**
 * Type-checks every quoted file as a user's project would: ipn-kit from the tarball, the other packages a
 * snippet imports (express, ioredis, pg, prom-client, their types) linked from ours: an ESM project under
 * `module: nodenext` and strict, a CommonJS one under `module: commonjs` (node10 resolution), and a bundler one.
 */
function compileSnippets(app) {
  // The Next.js and NestJS apps compile under their framework's own settings (next build, decorators): their
  // tests build and run them for real.
  const files = quotedTsFiles().filter((file) => !/^examples\/(nextjs|nestjs)\//.test(file));
  if (files.length < 5)
    throw new Error(`found only ${files.length} quoted ts files: is the marker format the same?`);
  const dir = join(app, 'snippets');
  for (const file of files) copyWithImports(file, dir);
  // Link what the snippets import and the tarball did not install; ipn-kit and zod stay the installed ones.
  const ours = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  for (const name of Object.keys({ ...ours.devDependencies, ...ours.peerDependencies })) {
    const link = join(app, 'node_modules', name);
    if (existsSync(link)) continue;
    mkdirSync(dirname(link), { recursive: true });
    symlinkSync(join(root, 'node_modules', name), link, 'dir');
  }
  const common = {
    target: 'es2022',
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    types: ['node', 'jest'],
  };
  const configs = {
    nodenext: { ...common, module: 'nodenext', moduleResolution: 'nodenext' },
    commonjs: { ...common, module: 'commonjs', esModuleInterop: true },
    // What Vite, esbuild and Next.js projects use.
    bundler: { ...common, module: 'preserve', moduleResolution: 'bundler' },
  };
  const failures = [];
  for (const [name, compilerOptions] of Object.entries(configs)) {
    writeFileSync(
      join(dir, 'package.json'),
      JSON.stringify({ private: true, type: name === 'commonjs' ? 'commonjs' : 'module' }),
    );
    writeFileSync(join(dir, `tsconfig.${name}.json`), JSON.stringify({ compilerOptions, files }));
    try {
      run(join(root, 'node_modules/.bin/tsc'), ['-p', `tsconfig.${name}.json`], dir);
    } catch (error) {
      failures.push(`under module ${name}:\n${String(error.stdout ?? '')}${String(error.stderr ?? '')}`);
    }
  }
  if (failures.length > 0)
    throw new Error(`the documentation's snippets do not compile\n${failures.join('\n')}`);
}

const failed = results.filter((result) => !result.ok).length;
console.log(`packaging: ${results.length - failed} passed, ${failed} failed`);
process.exitCode = failed > 0 ? 1 : 0;
