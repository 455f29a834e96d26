// app/api/ipn/route.ts
import { after } from 'next/server';
import { ipn } from '../../../lib/ipn';

// `after` keeps the function alive for the work after the 200: verification and your listeners.
export const POST = (req: Request) => ipn.fetch(req, { waitUntil: after });
export const GET = (req: Request) => ipn.fetch(req);
export const dynamic = 'force-dynamic';
