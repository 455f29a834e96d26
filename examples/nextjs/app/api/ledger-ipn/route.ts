// app/api/ledger-ipn/route.ts: at least once, crediting the ledger through Drizzle (lib/ledger-ipn.ts).
import { after } from 'next/server';
import { getLedgerIpn } from '../../../lib/ledger-ipn';

export const POST = (req: Request) => getLedgerIpn().fetch(req, { waitUntil: after });
export const dynamic = 'force-dynamic';
