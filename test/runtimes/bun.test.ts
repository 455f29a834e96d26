import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { describeIpnAnswers } from './ipn-answers.js';
import { packedApp, ROOT } from './packed.js';
import { binary, describeWithRuntime, startServer, type RuntimeServer } from './runtime-process.js';

// The documented Bun server (examples/runtimes/bun.ts), the router at module scope, ipn-kit from the tarball.
describeWithRuntime('bun', 'Bun.serve({ fetch: (req) => ipn.fetch(req) })', () => {
  let server: RuntimeServer | undefined;

  beforeAll(async () => {
    const app = packedApp();
    copyFileSync(join(ROOT, 'examples/runtimes/bun.ts'), join(app, 'bun.ts'));
    // PORT=0: Bun.serve reads $PORT and takes a free port; the file prints the URL it listens on.
    server = await startServer(binary('bun'), ['run', 'bun.ts'], {
      cwd: app,
      env: { PORT: '0' },
      ready: /listening on http:\/\/[^:/]+:(\d+)/,
    });
  }, 300_000); // the first run of a change to lib/ packs and installs the tarball

  afterAll(() => server?.stop());

  describeIpnAnswers(() => server!.url);
});
