// A Cloudflare Worker: wrangler.toml beside it sets nodejs_compat. Run by test/runtimes/workers.test.ts.
// #region worker
import { ipnRouter } from 'ipn-kit';

// Module scope: one router per isolate. In production give it a store the Worker can reach.
export const ipn = ipnRouter();

export default {
  fetch(req: Request, env: unknown, ctx: ExecutionContext) {
    return ipn.fetch(req, ctx); // ctx.waitUntil carries the work after the 200: your listeners, the store
  },
};
// #endregion worker

// The part of Workers' ExecutionContext this file uses: the project type-checks against Node's types.
interface ExecutionContext {
  waitUntil(promise: Promise<unknown>): void;
}
