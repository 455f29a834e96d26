import { timingSafeEqual } from 'node:crypto';
import type { Hono } from 'hono';
import type { IpnRouter } from 'ipn-kit';
import { adminFetchHandler } from 'ipn-kit/admin';

// #region fetch
/** Serves the operator's page at /ops/ipn of a Hono app behind HTTP basic auth (or your app's own login). */
export function mountAdminPage(app: Hono, ipn: IpnRouter<unknown>, password: string): void {
  const expected = Buffer.from(`Basic ${Buffer.from(`operator:${password}`).toString('base64')}`);
  // authorize is given the WHATWG Request.
  const isOperator = (request: Request) => {
    const given = Buffer.from(request.headers.get('authorization') ?? '');
    return given.length === expected.length && timingSafeEqual(given, expected);
  };
  const admin = adminFetchHandler({ ipn, basePath: '/ops/ipn', authorize: isOperator });
  // Ask the browser for the password; the page itself answers 403 to anyone else.
  app.all('/ops/ipn/*', (c) =>
    isOperator(c.req.raw) ? admin(c.req.raw) : c.body(null, 401, { 'WWW-Authenticate': 'Basic realm="ipn"' }),
  );
}
// #endregion fetch
