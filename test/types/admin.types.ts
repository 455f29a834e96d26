/**
 * Type tests, checked by `npm run typecheck` (tsc --noEmit), never run: which request `authorize` gets.
 */
import type { IncomingMessage } from 'node:http';
import { ipnRouter } from '../../lib/index.js';
import { adminFetchHandler, adminRouter } from '../../lib/admin.js';
import type { AdminFetchHandler } from '../../lib/admin/admin-fetch.js';

const ipn = ipnRouter();

// adminRouter(): node's IncomingMessage (Express's request extends it).
adminRouter({ ipn, authorize: (req) => req.headers.authorization === 'x' });
adminRouter({ ipn, authorize: (req: IncomingMessage) => req.socket.remoteAddress === '127.0.0.1' });
// @ts-expect-error adminRouter's authorize is given an IncomingMessage, not a WHATWG Request
adminRouter({ ipn, authorize: (req: Request) => req.headers.get('authorization') === 'x' });

// adminFetchHandler(): the WHATWG Request.
const admin: AdminFetchHandler = adminFetchHandler({
  ipn,
  basePath: '/ops/ipn',
  authorize: (request) => request.headers.get('authorization') === 'x',
});
const answer: Promise<Response> = admin(new Request('http://localhost/ops/ipn/'));
void answer;
// @ts-expect-error adminFetchHandler's authorize is given a Request: its headers have no properties
adminFetchHandler({ ipn, authorize: (req) => req.headers.authorization === 'x' });
