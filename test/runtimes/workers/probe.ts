// The documented Worker (examples/runtimes/worker.ts), with what the test observes:
// a listener that finishes only after the response, and GET /credited to read what it recorded.
import worker, { ipn } from '../../../examples/runtimes/worker.js';

const credited: string[] = [];
ipn.on('successful', async (notification) => {
  // Something async after the 200, as a ledger write is: only ctx.waitUntil keeps it alive in workerd.
  await new Promise((resolve) => setTimeout(resolve, 50));
  credited.push(String(notification.custom_data));
});

export default {
  fetch(req: Request, env: unknown, ctx: { waitUntil(promise: Promise<unknown>): void }) {
    if (req.method === 'GET' && new URL(req.url).pathname === '/credited') return Response.json(credited);
    return worker.fetch(req, env, ctx);
  },
};
