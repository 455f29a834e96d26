// #region nextjs-prisma-route
// app/api/prisma-ipn/route.ts: the address you give the payment service.
import { after } from 'next/server';
import { getPaymentsIpn } from '../../../lib/payments-ipn';

// `after` keeps the function alive for the work after the 200: verification, then your listener.
export const POST = (req: Request) => getPaymentsIpn().ipn.fetch(req, { waitUntil: after });
export const dynamic = 'force-dynamic';
// #endregion nextjs-prisma-route
