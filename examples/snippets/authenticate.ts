import { createHmac, timingSafeEqual } from 'node:crypto';
import { hmacAuthenticator, ipnRouter, ipnUrl } from 'ipn-kit';

// #region hmac
// When the service signs its notifications: an HMAC-SHA256 of JSON.stringify(req.body), hex, in a header.
const signed = ipnRouter({
  authenticate: hmacAuthenticator({ secret: process.env.IPN_HMAC_SECRET ?? '', header: 'x-signature' }),
});
// The body's own `hash` field instead (signed over the body's JSON without it):
const hashed = ipnRouter({ authenticate: hmacAuthenticator({ secret: hmacSecret, field: 'hash' }) });
// #endregion hmac

// #region per-transaction
// A token per transaction: derived from your order id, which the service echoes in custom_data.
const tokenFor = (orderId: string) => createHmac('sha256', tokenSecret).update(orderId).digest('base64url');
const perTransaction = ipnRouter({
  authenticate: ({ token, record }) => {
    const expected = Buffer.from(tokenFor(String(record.custom_data)));
    const given = Buffer.from(token ?? '');
    return given.length === expected.length && timingSafeEqual(given, expected);
  },
});
// At initiation: ipn_url: ipnUrl('https://shop.example.com/ipn', { secret: tokenFor('order-42') })
// #endregion per-transaction

declare const hmacSecret: string;
declare const tokenSecret: string;
export { signed, hashed, perTransaction, tokenFor, ipnUrl };
