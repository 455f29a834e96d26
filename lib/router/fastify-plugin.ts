/// <reference types="node" preserve="true" />
import { Readable } from 'node:stream';
import type { FastifyPluginCallback, FastifyReply, FastifyRequest } from 'fastify';
import type { IpnRequest } from '../pipeline/ipn-outcome.js';
import type { IpnCore } from '../pipeline/ipn-core.js';
import { serve } from '../pipeline/serve.js';
import type { IpnRouter } from './ipn-router.js';
import { coreOf } from './ipn-router.js';
import { tokenOf } from '../authenticate/ipn-url.js';

/** The options of {@link ipnPlugin}, beside Fastify's own (`prefix`). */
export interface IpnPluginOptions {
  /** The router `ipnRouter()` made: its options, listeners, store and metrics serve this route. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- any customData type
  router: IpnRouter<any>;
}

// GET and HEAD are liveness pings; every other method gets the router's 405.
const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'];
/** Marks the stream the plugin's own content-type parser handed over, unread. */
const UNREAD = Symbol('ipn-kit.unread');

/**
 * A Fastify (4 or 5) plugin serving the IPN route at its prefix:
 * `app.register(ipnPlugin, { prefix: '/ipn', router: ipn })`. The plugin is encapsulated: inside it, every
 * content-type parser the host registered is replaced by one that hands the body over unread, so the router
 * reads it with its own limit and leniency (a JSON object labelled `text/plain` included), whatever the host
 * parses elsewhere. Fastify's `bodyLimit` does not apply to this route: the router's `limit` does.
 *
 * @example
 * import Fastify from 'fastify';
 * import { ipnRouter } from 'ipn-kit';
 * import { ipnPlugin } from 'ipn-kit/fastify';
 *
 * const ipn = ipnRouter();
 * ipn.on('successful', (n) => credit(n.custom_data, n.amount));
 * const app = Fastify();
 * await app.register(ipnPlugin, { prefix: '/ipn', router: ipn });
 */
export const ipnPlugin: FastifyPluginCallback<IpnPluginOptions> = (instance, options, done) => {
  let core: IpnCore<unknown>;
  try {
    core = coreOf(options.router, 'ipnPlugin');
  } catch (error) {
    done(error as Error); // fails app.register() / app.ready(), as Fastify reports a plugin's error
    return;
  }
  instance.removeAllContentTypeParsers();
  instance.addContentTypeParser('*', (_request, payload, parsed) => {
    parsed(null, { [UNREAD]: payload });
  });

  const handler = serve<[FastifyRequest, FastifyReply], FastifyReply>(core, {
    toIpnRequest,
    // The JSON text as it is: a host's reply serializer applies to objects only. For HEAD, no body: Fastify
    // keeps the Content-Length given.
    write: (reply, _request, fastifyReply) =>
      fastifyReply.code(reply.status).headers(reply.headers).send(reply.body),
    unwritten,
    written,
  });
  instance.route({ method: METHODS, url: '/', exposeHeadRoute: false, handler });
  done();
};

/**
 * After a write that threw (a host's hook inside `writeHead`): the reply is taken from Fastify (hijacked),
 * which would otherwise leave the exchange open or try to write it again through the same hook, and the
 * connection is closed. The service sees a failed delivery and resends; the resend is a duplicate.
 */
function unwritten(_request: FastifyRequest, reply: FastifyReply): FastifyReply {
  reply.hijack();
  if (!reply.raw.writableEnded) reply.raw.destroy();
  return reply;
}

/**
 * Behind a host's async `onSend` hook (cookies, sessions, compression), Fastify writes the answer after
 * `send()` returns: the work after it waits until the response is ended or the connection closed (`close`
 * follows both), so that listeners never hold the service's 200. Without such a hook it is written already.
 */
function written(_request: FastifyRequest, reply: FastifyReply): Promise<void> | undefined {
  const { raw } = reply;
  if (raw.writableEnded || raw.destroyed) return undefined;
  return new Promise((resolve) => {
    raw.once('finish', () => resolve());
    raw.once('close', () => resolve());
  });
}

function toIpnRequest(request: FastifyRequest): IpnRequest {
  const { headers } = request.raw;
  return {
    method: request.method,
    contentType: headers['content-type'],
    contentLength: headers['content-length'],
    contentEncoding: headers['content-encoding'],
    token: tokenOf(request.raw.url),
    headers, // for `authenticate` (a signature header)
    body: bodyOf(request),
  };
}

function bodyOf(request: FastifyRequest): IpnRequest['body'] {
  const body = request.body as { [UNREAD]?: Readable } | undefined;
  const stream = body?.[UNREAD];
  if (stream !== undefined) return { stream };
  // Fastify runs no parser for a request without a body: the stream is empty, or a host hook drained it.
  if (!request.raw.readableEnded) return { stream: request.raw };
  if (body !== undefined) return { parsed: body };
  return request.headers['content-length'] === '0' ? { stream: Readable.from([]) } : { consumed: true };
}
