// The known workaround while building a router at a Worker's module scope fails in workerd (randomUUID and
// timers at construction): the router is built inside the first fetch. Otherwise as probe.ts.
import { ipnRouter, type IpnRouter } from 'ipn-kit';

const credited: string[] = [];
let ipn: IpnRouter | undefined;

function router(): IpnRouter {
  if (ipn !== undefined) return ipn;
  ipn = ipnRouter();
  ipn.on('successful', async (notification) => {
    // Something async after the 200, as a ledger write is: only ctx.waitUntil keeps it alive in workerd.
    await new Promise((resolve) => setTimeout(resolve, 50));
    credited.push(String(notification.custom_data));
  });
  return ipn;
}

export default {
  fetch(req: Request, env: unknown, ctx: { waitUntil(promise: Promise<unknown>): void }) {
    if (req.method === 'GET' && new URL(req.url).pathname === '/credited') return Response.json(credited);
    return router().fetch(req, ctx);
  },
};
