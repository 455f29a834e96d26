// pages/api/legacy-ipn.ts
import { ipn } from '../../lib/ipn';

// The Pages Router hands over Node's req and res: the router reads its own body and answers itself.
export const config = { api: { bodyParser: false, externalResolver: true } };
export default ipn;
