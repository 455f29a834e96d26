// Packaging test: builds the npm tarball, installs it in a scratch project, and checks that `require`,
// `import` and the type declarations of both all work from the outside, as a user gets them.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

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
      'dist/cjs/index.js',
      'dist/cjs/index.d.ts',
      'dist/esm/index.js',
      'dist/esm/index.d.ts',
      ...['redis', 'postgres', 'testing', 'prometheus', 'admin', 'fastify'].flatMap((entry) => [
        `dist/cjs/${entry}.js`,
        `dist/esm/${entry}.js`,
        `dist/cjs/${entry}.d.ts`,
      ]),
      'dist/cjs/cli.js',
    ]) {
      if (!paths.includes(expected)) throw new Error(`missing ${expected}`);
    }
    const stray = paths.filter(
      (path) => /^(lib|test|examples)\//.test(path) || path.endsWith('.tsbuildinfo'),
    );
    if (stray.length > 0) throw new Error(`should not ship: ${stray.join(', ')}`);
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

  check('the Redis, PostgreSQL and testing entry points load, with no database driver installed', () => {
    writeFileSync(
      join(app, 'entries.cjs'),
      `const { RedisStore } = require('ipn-kit/redis');
const { PostgresStore, postgresSchemaSql } = require('ipn-kit/postgres');
const { createFakeProvider } = require('ipn-kit/testing');
if (typeof RedisStore !== 'function' || typeof PostgresStore !== 'function') process.exit(1);
if (!postgresSchemaSql('ipn_inbox').includes('ipn_inbox') || typeof createFakeProvider !== 'function') process.exit(1);
`,
    );
    run('node', ['entries.cjs'], app);
  });

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
const client = createStatusClient({ baseUrl: provider.statusBaseUrl, apiKey: 'key' });
const ipn = ipnRouter({ verify: client });
const events = [];
ipn.on('successful', (n) => events.push(n.custom_data));
ipn.on('rejected', (e) => events.push('rejected:' + e.reason));
const server = createServer(ipn);
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const ipnUrl = 'http://127.0.0.1:' + server.address().port + '/';
await provider.initiate({ amount: 100, ipnUrl, customData: 'order-1', outcome: 'SUCCESSFUL' }).delivered;
await provider.forge({ ipnUrl, customData: 'order-2' });
for (let i = 0; i < 200 && events.length < 2; i += 1) await new Promise((r) => setTimeout(r, 10));
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
} catch (error) {
  results.push({ name: 'setup', ok: false });
  console.log(`  FAIL  setup\n${String(error.stderr ?? '')}${error.message}`);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}

const failed = results.filter((result) => !result.ok).length;
console.log(`packaging: ${results.length - failed} passed, ${failed} failed`);
process.exitCode = failed > 0 ? 1 : 0;
