import { app } from './context.js';
// #region secret
import { ipnRouter, ipnUrl } from 'ipn-kit';

const secret = process.env.IPN_SECRET; // once: randomBytes(24).toString('base64url')
if (!secret) throw new Error('set IPN_SECRET');
app.use('/ipn', ipnRouter({ secret }));
// When you initiate a payment, give the service this address:
const address = ipnUrl('https://shop.example.com/ipn', { secret }); // https://shop.example.com/ipn?token=...
// #endregion secret

export { address };
