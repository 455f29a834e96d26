/// <reference types="node" preserve="true" />
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { NodeHandler } from '../router/node-handler.js';
import { createAdminCore, stripSlash, type AdminAnswer } from './admin-core.js';
import { resolveAdminOptions, type AdminOptions } from './admin-options.js';
import { readForm } from './read-form.js';

/**
 * The operator's page: a handler that Express mounts with `app.use(path, admin)` and `http.createServer` takes.
 * @inline
 */
export type AdminRouter = NodeHandler;

/**
 * The operator's page for payment notifications: counts, a filtered list of the durable inbox, each entry's
 * record, attempts and last error, the router's metrics and recent rejections, and the actions (replay one,
 * replay the dead, purge delivered, reconcile by hand), each confirmed, CSRF-protected and behind
 * `authorize`. Server-rendered HTML with its own style sheet: no build step, no CDN, no script. For a
 * fetch-style server (Hono, Next.js, Workers, Deno, Bun), `adminFetchHandler()` serves the same page.
 *
 * @example
 * import { adminRouter } from 'ipn-kit/admin';
 * app.use('/ops/ipn', requireLogin, adminRouter({ ipn, authorize: (req) => req.user?.isAdmin === true }));
 */
export function adminRouter(
  options: Partial<AdminOptions> & Pick<AdminOptions, 'ipn' | 'authorize'>,
): AdminRouter {
  const core = createAdminCore(resolveAdminOptions(options));
  return (req, res) => {
    const mount = (req as { baseUrl?: unknown }).baseUrl;
    const base = stripSlash(typeof mount === 'string' ? mount : '');
    const { headers } = req;
    void core({
      raw: req,
      method: req.method ?? 'GET',
      target: req.url ?? '/',
      base,
      cookie: headers.cookie,
      fetchSite: headers['sec-fetch-site'],
      secure: isSecure(req),
      form: () => readForm(req),
    }).then((answer) => send(res, answer));
  };
}

function isSecure(req: IncomingMessage): boolean {
  return (
    (req.socket as { encrypted?: boolean }).encrypted === true || req.headers['x-forwarded-proto'] === 'https'
  );
}

function send(res: ServerResponse, { status, headers, body }: AdminAnswer): void {
  try {
    if (res.headersSent) return void res.end();
    res.writeHead(status, { ...headers, 'Content-Length': Buffer.byteLength(body) });
    res.end(res.req.method === 'HEAD' ? undefined : body);
  } catch {
    // The connection is gone: nothing left to answer.
  }
}
