// app/api/ipn-drain/route.ts: Vercel Cron calls it with GET on the schedule in vercel.json, sending
// `Authorization: Bearer <CRON_SECRET>` (set CRON_SECRET in the project's environment variables).
import { ipn } from '../../../lib/ipn';

// Seconds the function may run: the drain's budget, and a margin for the attempts it started.
export const maxDuration = 60;

export async function GET(req: Request): Promise<Response> {
  const secret = process.env.CRON_SECRET;
  if (!secret || req.headers.get('authorization') !== `Bearer ${secret}`) {
    return new Response(null, { status: 401 });
  }
  // What the router's timers would have done while the function was frozen: retries, recovery, the sweep.
  const counts = await ipn.drain({ budgetMs: 30_000 });
  return Response.json(counts);
}
export const dynamic = 'force-dynamic';
