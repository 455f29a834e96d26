import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { describeIpnAnswers } from './ipn-answers.js';
import { packedApp, ROOT } from './packed.js';
import { binary, describeWithRuntime, startServer, type RuntimeServer } from './runtime-process.js';

// The documented Deno server (examples/runtimes/deno.ts), the router at module scope, ipn-kit from the
// tarball. The import resolves through the project's package.json and node_modules (npm install), which
// Deno 2 uses by itself; the permissions are the documented ones and no more: a missing one would throw.
describeWithRuntime('deno', 'Deno.serve((req) => ipn.fetch(req))', () => {
  let server: RuntimeServer | undefined;

  beforeAll(async () => {
    const app = packedApp();
    copyFileSync(join(ROOT, 'examples/runtimes/deno.ts'), join(app, 'deno.ts'));
    server = await startServer(binary('deno'), ['run', '--allow-net', '--allow-env=PORT', 'deno.ts'], {
      cwd: app,
      // PORT=0: a free port; Deno.serve prints the one it got.
      env: { PORT: '0', DENO_NO_UPDATE_CHECK: '1' },
      ready: /Listening on http:\/\/[^:/]+:(\d+)/,
    });
  }, 300_000); // the first run of a change to lib/ packs and installs the tarball

  afterAll(() => server?.stop());

  describeIpnAnswers(() => server!.url);
});
