import type { IpnRouter } from 'ipn-kit';

// #region hono
import { Hono } from 'hono';

export function createHonoApp(ipn: IpnRouter) {
  const app = new Hono();
  // On Cloudflare Workers, pass the execution context too: ipn.fetch(c.req.raw, c.executionCtx)
  app.all('/ipn', (c) => ipn.fetch(c.req.raw));
  return app; // then: serve({ fetch: app.fetch, port: 3000 }) from @hono/node-server
}
// #endregion hono
