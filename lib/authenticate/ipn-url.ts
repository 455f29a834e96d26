import { createHash, timingSafeEqual } from 'node:crypto';

/** The query parameter that carries the secret in the IPN address. */
export const TOKEN_PARAMETER = 'token';

/**
 * The IPN address to give the service at initiation, carrying `secret` as its `token` query parameter, for a
 * router created with `ipnRouter({ secret })`.
 *
 * @example
 * const secret = process.env.IPN_SECRET; // at least 16 characters: randomBytes(24).toString('base64url')
 * app.use('/ipn', ipnRouter({ secret }));
 * initiatePayment({ ..., ipn_url: ipnUrl('https://shop.example.com/ipn', { secret }) });
 * // -> https://shop.example.com/ipn?token=...
 */
export function ipnUrl(base: string, options: { secret: string }): string {
  let url: URL;
  try {
    url = new URL(base);
  } catch {
    throw new TypeError(
      `ipnUrl: base must be an absolute URL such as https://shop.example.com/ipn, got ${base}`,
    );
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:')
    throw new TypeError(`ipnUrl: base must be an http(s) URL, got ${base}`);
  if (typeof options?.secret !== 'string' || options.secret.length === 0)
    throw new TypeError('ipnUrl: options.secret must be a non-empty string');
  url.searchParams.set(TOKEN_PARAMETER, options.secret);
  return url.toString();
}

/** The `token` query parameter of a request target (`/ipn?token=...`), or `undefined`. */
export function tokenOf(target: string | undefined): string | undefined {
  const start = target?.indexOf('?') ?? -1;
  if (target === undefined || start === -1) return undefined;
  return new URLSearchParams(target.slice(start + 1)).get(TOKEN_PARAMETER) ?? undefined;
}

/**
 * Whether `token` is one of `secrets`, in time that does not depend on where they differ: both sides are
 * hashed to equal lengths first, and every secret is compared.
 */
export function matchesSecret(token: string | undefined, secrets: readonly string[]): boolean {
  if (token === undefined) return false;
  const given = digest(token);
  let match = false;
  for (const secret of secrets) match = timingSafeEqual(given, digest(secret)) || match;
  return match;
}

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}
