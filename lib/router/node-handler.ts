/// <reference types="node" preserve="true" />
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { IpnRequest } from '../pipeline/ipn-outcome.js';
import type { IpnCore } from '../pipeline/ipn-core.js';
import { serve, type Reply } from '../pipeline/serve.js';
import { tokenOf } from '../authenticate/ipn-url.js';

/** A handler that Express (4 or 5) mounts and that `http.createServer` takes as it is. */
export type NodeHandler = (
  req: IncomingMessage,
  res: ServerResponse,
  next?: (error?: unknown) => void,
) => void;

/** The node:http and Express adapter over the core. */
export function createNodeHandler(core: IpnCore<unknown>): NodeHandler {
  const { logger } = core.options;
  const handler: NodeHandler = (req, res, next) => {
    // Mounted by Express, only the mount path itself is ours; anything below it belongs to the host app.
    if (next && !isMountRoot(req, handler)) {
      // The path only: a query string may carry the IPN address token.
      const path = (req.url ?? '').split('?')[0];
      logger.debug({ path }, 'ipn-kit passed a request below its mount path on to the app');
      return next();
    }
    void respond(req, res);
  };
  // Never rejects: even a throw while reading the request becomes a 500, not a crash.
  const respond = serve<[IncomingMessage, ServerResponse], void>(core, {
    toIpnRequest,
    write,
    unwritten,
  });
  return handler;
}

type HostRequest = IncomingMessage & {
  body?: unknown;
  _body?: boolean;
  rawBody?: unknown;
  route?: { path?: unknown; stack?: Array<{ handle?: unknown }> };
};

/**
 * `app.use('/ipn', ipn)` strips the mount path (url `/`). `app.post('/ipn', ipn)` puts the handler in
 * `req.route`, or, wrapped in a function of the host's, a route whose path matches the request's as Express
 * matches it. A route that is neither is a stale one: Express leaves `req.route` set after an earlier route
 * called `next()`.
 */
function isMountRoot(req: HostRequest, handler: unknown): boolean {
  const url = req.url ?? '/';
  const end = url.indexOf('?');
  const path = end === -1 ? url : url.slice(0, end);
  if (path === '/' || path === '') return true;
  const { route } = req;
  return (
    route !== undefined &&
    (routeMatches(route.path, path) || route.stack?.some((layer) => layer.handle === handler) === true)
  );
}

/**
 * Whether a route path (`/ipn`, or a list of paths) matches `path` as Express 4 and 5 route by default:
 * case-insensitive, with or without one trailing slash. A pattern (a parameter, a wildcard, a regular
 * expression) is not taken for a match: it may be a stale route's, which says nothing of this request.
 */
function routeMatches(routePath: unknown, path: string): boolean {
  if (Array.isArray(routePath)) return routePath.some((item) => routeMatches(item, path));
  if (typeof routePath !== 'string') return false;
  if (routePath === path) return true;
  if (/[^\w\-./~%]/.test(routePath)) return false;
  return withoutTrailingSlash(routePath).toLowerCase() === withoutTrailingSlash(path).toLowerCase();
}

function withoutTrailingSlash(path: string): string {
  return path.length > 1 && path.endsWith('/') ? path.slice(0, -1) : path;
}

function toIpnRequest(req: HostRequest): IpnRequest {
  const { headers } = req;
  return {
    method: req.method ?? 'GET',
    contentType: headers['content-type'],
    contentLength: headers['content-length'],
    contentEncoding: headers['content-encoding'],
    token: tokenOf(req.url),
    headers,
    body: bodyOf(req),
  };
}

/**
 * The stream to read, the bytes or value a host parser left, or nothing if the stream was drained.
 *
 * A host that parsed the body and kept the bytes it read as a Buffer on `req.rawBody` (Firebase Functions and
 * Google Cloud Functions, whose Functions Framework parses every request; a `verify` hook of body-parser) is
 * read from those bytes, not from its `req.body`: they are exactly what was received (after any
 * `Content-Encoding` was undone), so `authenticate` sees them and the record is parsed as the router parses
 * a body it reads itself. Only once the stream is consumed: while it is not, it is the source.
 */
function bodyOf(req: HostRequest): IpnRequest['body'] {
  // body-parser 1.x (Express 4) sets `_body` once it has parsed the stream.
  const parsedByHost = req._body === true || req.readableEnded;
  if (parsedByHost && Buffer.isBuffer(req.rawBody)) return { parsed: req.rawBody };
  if (req._body === true) return { parsed: req.body };
  if (!req.readableEnded) return { stream: req };
  const { body } = req;
  if (body === undefined) return { consumed: true };
  // Express 4's parsers also set `req.body = {}` when they skip a request: a body of more than a padded `{}`
  // that left only `{}` was drained by something else. (Express 5's leave `{}` only for a body that was `{}`.)
  const drained =
    isPlainObject(body) &&
    Object.keys(body).length === 0 &&
    Number(req.headers['content-length']) > PADDED_EMPTY;
  return drained ? { consumed: true } : { parsed: body };
}

/** Bytes beyond which a JSON text cannot be an empty object with some whitespace. */
const PADDED_EMPTY = 64;

function isPlainObject(value: unknown): value is object {
  return typeof value === 'object' && value !== null && Object.getPrototypeOf(value) === Object.prototype;
}

/**
 * After a write that threw (a host's hook inside `writeHead`): the exchange is ended by closing the
 * connection, the one thing left that cannot throw again. Left open, the service would wait for an answer
 * that never comes (until a server timeout, minutes later); closed, it sees a failed delivery and resends,
 * and the resend is answered as a duplicate.
 */
function unwritten(_req: IncomingMessage, res: ServerResponse): void {
  if (!res.writableEnded) res.destroy();
}

/** Writes the reply, unless something of the host's already answered. */
function write(reply: Reply, _req: IncomingMessage, res: ServerResponse): void {
  if (res.headersSent || res.writableEnded) return;
  res.writeHead(reply.status, reply.headers);
  res.end(reply.body);
}
