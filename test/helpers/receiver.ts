import type { IncomingMessage, ServerResponse } from 'node:http';
import { listen, type Running } from './servers.js';

/** An IPN endpoint that records what it receives and answers the scripted statuses in turn, then `otherwise`. */
export interface Receiver extends Running {
  bodies: Record<string, any>[];
  /** Most requests it was answering at the same time. */
  maxInFlight: () => number;
}

/**
 * Starts a recording endpoint. `holdUntil`: keep the first answers until that many requests arrived (proves
 * they came at once).
 */
export async function startReceiver(
  options: { statuses?: number[]; otherwise?: number; holdUntil?: number } = {},
): Promise<Receiver> {
  const { statuses = [], otherwise = 200, holdUntil = 0 } = options;
  const bodies: Record<string, any>[] = [];
  const held: Array<() => void> = [];
  let inFlight = 0;
  let maxInFlight = 0;
  const releaseAll = () => held.splice(0).forEach((answer) => answer());
  const running = await listen((req: IncomingMessage, res: ServerResponse) => {
    inFlight += 1;
    maxInFlight = Math.max(maxInFlight, inFlight);
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      bodies.push(JSON.parse(Buffer.concat(chunks).toString('utf8')));
      const status = statuses[bodies.length - 1] ?? otherwise;
      const answer = () => {
        inFlight -= 1;
        res
          .writeHead(status, { 'content-type': 'application/json' })
          .end(JSON.stringify({ ok: status === 200 }));
      };
      if (bodies.length > holdUntil) return void setImmediate(answer);
      held.push(answer);
      // Never hang the suite: a failing test sees maxInFlight below holdUntil instead.
      if (held.length === 1) setTimeout(releaseAll, 2_000).unref();
      if (held.length >= holdUntil) releaseAll();
    });
  });
  return { ...running, bodies, maxInFlight: () => maxInFlight };
}
