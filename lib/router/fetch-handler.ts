/// <reference types="node" preserve="true" />
import { Readable } from 'node:stream';
import type { IpnRequest } from '../pipeline/ipn-outcome.js';
import type { IpnCore } from '../pipeline/ipn-core.js';
import { serve } from '../pipeline/serve.js';
import { tokenOf } from '../authenticate/ipn-url.js';

/**
 * What a fetch-style platform gives a handler beside the request. Only `waitUntil` is read: Next.js's
 * `after`, Vercel's `waitUntil`, a Cloudflare Worker's `ctx` (passed as it is), Deno's and Bun's equivalents.
 * @inline
 */
export interface FetchContext {
  /**
   * Keeps the function alive until the promise settles, once the response is returned. The router hands
   * it the work that runs after the 200: verification (with `verify`), your listeners and the promises they
   * return, and at-least-once the store's bookkeeping. The promise never rejects.
   */
  waitUntil?(promise: Promise<unknown>): void;
}

/**
 * A Web-standard handler: a WHATWG `Request` in, a `Response` out, with the router's statuses and JSON
 * bodies. Any further argument (a Next.js route's `{ params }`) is ignored unless it has a `waitUntil`.
 */
export type FetchHandler = (request: Request, context?: FetchContext) => Promise<Response>;

/** The fetch (Web `Request` / `Response`) adapter over the core. Never rejects. */
export function createFetchHandler(core: IpnCore<unknown>): FetchHandler {
  return serve<[Request, FetchContext?], Response>(core, {
    toIpnRequest,
    write: (reply) => new Response(reply.body ?? null, { status: reply.status, headers: reply.headers }),
    // Not reachable with the router's own answers; still never a rejection, and the service resends.
    unwritten: () => new Response(null, { status: 500 }),
    waitUntil: (work, _request, context) => {
      // Called as a method: a Cloudflare Worker's `ctx.waitUntil` needs its `this`.
      if (typeof context?.waitUntil === 'function') return context.waitUntil(work);
      return undefined;
    },
  });
}

function toIpnRequest(request: Request): IpnRequest {
  const { headers } = request;
  return {
    method: request.method,
    contentType: headers.get('content-type') ?? undefined,
    contentLength: headers.get('content-length') ?? undefined,
    contentEncoding: headers.get('content-encoding') ?? undefined,
    token: tokenOf(request.url),
    // For `authenticate` (a signature header): names in lower case, as the Headers object gives them.
    headers: Object.fromEntries(headers),
    body: bodyOf(request),
  };
}

function bodyOf(request: Request): IpnRequest['body'] {
  // Something read the body before the router (`await req.json()` in the host's code, a middleware), or
  // took a reader of it (locked, while `bodyUsed` is still false): the router cannot read it either.
  if (request.bodyUsed || request.body?.locked === true) return { consumed: true };
  if (request.body === null) return { stream: Readable.from([]) };
  const stream = Readable.fromWeb(request.body);
  // This stream is ipn-kit's own, and nobody listens to it once the router stopped reading (or never read:
  // a 401, a 405, a declared 413): a body that errors then (the client went away) must not be an 'error'
  // event without a listener, an uncaught exception that stops the host. readBody has its own listener
  // while it reads, so a failure during the read is still seen.
  stream.on('error', () => {});
  return { stream };
}
