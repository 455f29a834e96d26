import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import { createExpressApp } from '../../examples/frameworks/express.js';
import { createHonoApp } from '../../examples/frameworks/hono.js';
import { createIpnServer } from '../../examples/frameworks/node-http.js';
import { describeFramework } from '../helpers/framework-scenario.js';
import { listen } from '../helpers/servers.js';

// Each documented snippet (docs/frameworks.md) through its framework's real server.

describeFramework('Hono on @hono/node-server (ipn.fetch)', async (ipn) => {
  const app = createHonoApp(ipn);
  const server = await new Promise<ReturnType<typeof serve>>((resolve) => {
    const started = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(started));
  });
  const { port } = server.address() as AddressInfo;
  return {
    ipnUrl: `http://127.0.0.1:${port}/ipn`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
});

describeFramework('Express 5, the documented snippet', async (ipn) => {
  const running = await listen(createExpressApp(ipn));
  return { ipnUrl: `${running.url}/ipn`, close: running.close };
});

describeFramework('node:http, the documented snippet', async (ipn) => {
  const server = createIpnServer(ipn);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    ipnUrl: `http://127.0.0.1:${port}/ipn`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
});
