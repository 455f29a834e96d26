import { timingSafeEqual } from 'node:crypto';
import type { Express, NextFunction, Request, Response } from 'express';
import type { IpnRouter } from 'ipn-kit';
import { adminRouter } from 'ipn-kit/admin';

// #region mount
/** Mounts the operator's page at /ops/ipn behind HTTP basic auth (use your app's own login if it has one). */
export function mountAdminPage(app: Express, ipn: IpnRouter<unknown>, password: string): void {
  const expected = Buffer.from(`Basic ${Buffer.from(`operator:${password}`).toString('base64')}`);
  const isOperator = (req: { headers: { authorization?: string } }) => {
    const given = Buffer.from(req.headers.authorization ?? '');
    return given.length === expected.length && timingSafeEqual(given, expected);
  };
  // Ask the browser for the password; the page itself answers 403 to anyone else.
  const login = (req: Request, res: Response, next: NextFunction) =>
    isOperator(req) ? next() : res.set('WWW-Authenticate', 'Basic realm="ipn"').sendStatus(401);
  app.use('/ops/ipn', login, adminRouter({ ipn, authorize: isOperator }));
}
// #endregion mount
