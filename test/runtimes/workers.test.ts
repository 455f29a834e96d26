import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { uniquePayload } from '../helpers/payloads.js';
import { eventually } from '../helpers/services.js';
import { checkIpnAnswers, describeIpnAnswers } from './ipn-answers.js';
import { packedApp, ROOT } from './packed.js';
import { describeWithRuntime, wranglerDev, type RuntimeServer } from './runtime-process.js';

/**
 * Cloudflare Workers, run locally by wrangler 4.86 in workerd with the documented wrangler.toml
 * (nodejs_compat), ipn-kit from the tarball and bundled by wrangler as a user's deploy would be.
 */

let dir = '';

/** What a user deploys: the documented Worker and its wrangler.toml. */
const WORKER_FILES = ['examples/runtimes/worker.ts', 'examples/runtimes/wrangler.toml'];

/** The listener's record, read back from the Worker: it finished under ctx.waitUntil, after the 200. */
async function credited(url: string): Promise<string[]> {
  return (await (await fetch(`${url}/credited`)).json()) as string[];
}

async function checkWaitUntil(url: string): Promise<void> {
  const notification = uniquePayload({ custom_data: `order-${Date.now()}` });
  const body = JSON.stringify(notification);
  const answer = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  expect(answer.status).toBe(200);
  let seen: string[] = [];
  await eventually('the listener recorded the notification', async () => {
    seen = await credited(url);
    return seen.includes(String(notification.custom_data));
  });
  // Once: the duplicate answers of the other tests emit nothing.
  expect(seen.filter((id) => id === notification.custom_data)).toHaveLength(1);
}

describeWithRuntime('wrangler', 'Cloudflare Workers (workerd, wrangler 4.86)', () => {
  beforeAll(() => {
    dir = mkdtempSync(join(packedApp(), 'workers-'));
    // The repository's layout, so that probe.ts imports the documented worker.ts as it does here.
    for (const file of [...WORKER_FILES, 'test/runtimes/workers/probe.ts', 'test/runtimes/workers/lazy.ts']) {
      mkdirSync(dirname(join(dir, file)), { recursive: true });
      copyFileSync(join(ROOT, file), join(dir, file));
    }
  }, 300_000); // the first run of a change to lib/ packs and installs the tarball

  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  // The router at module scope: construction makes no id and starts no timer (workerd refuses both in
  // global scope, "Disallowed operation called within global scope").
  test('the documented Worker, router at module scope: answers, and ctx.waitUntil carries the listeners', async () => {
    const server = await wranglerDev(dir, '../../test/runtimes/workers/probe.ts');
    try {
      await checkIpnAnswers(server.url);
      await checkWaitUntil(server.url);
    } finally {
      await server.stop();
    }
  }, 90_000);

  describe('the router built inside the first fetch (the workaround until then)', () => {
    let server: RuntimeServer | undefined;
    beforeAll(async () => {
      server = await wranglerDev(dir, '../../test/runtimes/workers/lazy.ts');
    }, 90_000);
    afterAll(() => server?.stop());

    describeIpnAnswers(() => server!.url);

    test('ctx.waitUntil carries a listener that is still awaiting after the 200', async () => {
      await checkWaitUntil(server!.url);
    }, 30_000);
  });
});
