import { createAdminCore, stripSlash, type AdminAnswer } from './admin-core.js';
import { resolveAdminOptions, type AdminOptions } from './admin-options.js';
import { readFetchForm } from './read-form.js';

/**
 * Options of {@link adminFetchHandler}: those of `adminRouter()`, `authorize` given the WHATWG `Request`.
 * @inline
 */
export interface AdminFetchOptions extends AdminOptions<Request> {
  /**
   * The path the page is served under (`/ops/ipn`): the pages' links start with it, and a request outside
   * it answers 404. A fetch handler sees the whole URL, so, unlike Express's `app.use(path, ...)`, nothing
   * strips it. `''` serves the page at the root. @default ''
   */
  basePath: string;
}

/**
 * The operator's page as a Web-standard handler: a WHATWG `Request` in, a `Response` out. Never rejects.
 * Needs no `this`: `app.all('/ops/ipn/*', (c) => admin(c.req.raw))`.
 * @inline
 */
export type AdminFetchHandler = (request: Request) => Promise<Response>;

/**
 * The operator's page for a fetch-style server (Hono, Next.js route handlers, Cloudflare Workers, Deno, Bun):
 * the same pages, headers, CSRF protection and `authorize` check as {@link adminRouter}, which it shares its
 * logic with; `authorize` is given the `Request`. A function of its own rather than a `.fetch` method of
 * `adminRouter()`, so that `authorize` is typed with the request it really gets.
 *
 * @example
 * import { adminFetchHandler } from 'ipn-kit/admin';
 * const admin = adminFetchHandler({ ipn, basePath: '/ops/ipn', authorize: (request) => isOperator(request) });
 * app.all('/ops/ipn/*', (c) => admin(c.req.raw));
 */
export function adminFetchHandler(
  options: Partial<AdminFetchOptions> & Pick<AdminFetchOptions, 'ipn' | 'authorize'>,
): AdminFetchHandler {
  const { basePath = '', ...rest } = options;
  if (typeof basePath !== 'string' || (basePath !== '' && !/^\/[^?#]*$/.test(basePath))) {
    throw new TypeError(
      `adminFetchHandler: basePath must be '' or a path starting with / (such as '/ops/ipn'), got ${String(basePath)}`,
    );
  }
  const base = stripSlash(basePath);
  const core = createAdminCore(resolveAdminOptions<Request>(rest, 'adminFetchHandler'));
  return async (request) => {
    const { headers } = request;
    const url = new URL(request.url);
    const answer = await core({
      raw: request,
      method: request.method,
      target: targetOf(url, base),
      base,
      cookie: headers.get('cookie') ?? undefined,
      fetchSite: headers.get('sec-fetch-site') ?? undefined,
      secure: url.protocol === 'https:' || headers.get('x-forwarded-proto') === 'https',
      form: () => readFetchForm(request),
    });
    return toResponse(request.method, answer);
  };
}

/** The path and query below `base`, or `undefined` for a request outside it. */
function targetOf(url: URL, base: string): string | undefined {
  const { pathname, search } = url;
  if (pathname === base) return `/${search}`;
  if (base === '' || pathname.startsWith(`${base}/`)) return pathname.slice(base.length) + search;
  return undefined;
}

function toResponse(method: string, { status, headers, body }: AdminAnswer): Response {
  return new Response(method === 'HEAD' ? null : body, { status, headers });
}
