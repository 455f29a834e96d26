import type { IpnRouter } from 'ipn-kit';

// Scheduled calls of ipn.drain() on platforms that freeze the function between requests, where the
// router's timers (retries, recovery, the sweep) may never fire. Each returns what the platform calls.

// #region workers
/** A Worker's execution context (`ExecutionContext` in @cloudflare/workers-types). */
interface WorkerContext {
  waitUntil(promise: Promise<unknown>): void;
}

export function createWorker(ipn: IpnRouter) {
  return {
    fetch: (req: Request, _env: unknown, ctx: WorkerContext) => ipn.fetch(req, ctx),
    // A Cron Trigger (wrangler.toml: [triggers] crons = ["* * * * *"]): waitUntil keeps the pass alive.
    scheduled(_controller: unknown, _env: unknown, ctx: WorkerContext): void {
      ctx.waitUntil(ipn.drain({ budgetMs: 20_000 }).then((counts) => console.log('ipn drain', counts)));
    },
  };
}
// then: export default createWorker(ipn);
// #endregion workers

// #region supabase
// supabase/functions/ipn-drain/index.ts, called every minute by pg_cron through pg_net (see below):
// Deno.serve(drainEndpoint(ipn, Deno.env.get('CRON_SECRET') ?? ''));
export function drainEndpoint(ipn: IpnRouter, secret: string) {
  return async (req: Request): Promise<Response> => {
    if (secret === '' || req.headers.get('authorization') !== `Bearer ${secret}`) {
      return new Response(null, { status: 401 });
    }
    return Response.json(await ipn.drain({ budgetMs: 20_000 }));
  };
}
// #endregion supabase

// #region firebase
// functions/src/index.ts, with onSchedule from 'firebase-functions/v2/scheduler':
// export const ipnDrain = onSchedule({ schedule: 'every 1 minutes', timeoutSeconds: 120 }, drainJob(ipn));
export function drainJob(ipn: IpnRouter) {
  return async (): Promise<void> => {
    const counts = await ipn.drain({ budgetMs: 60_000 });
    if (counts.left > 0) console.warn('ipn drain: more was due than one pass took', counts);
  };
}
// #endregion firebase
