import { createHmac, getHashes, timingSafeEqual } from 'node:crypto';
import type { Authenticate, AuthenticateInput } from './authenticate.js';

/**
 * Options of {@link hmacAuthenticator}. `secret`, and `header` or `field`, are required.
 * @inline
 */
export interface HmacOptions {
  /** The shared secret; several during a rotation (any one may match). Required. */
  secret: string | Buffer | ReadonlyArray<string | Buffer>;
  /** The HMAC's hash, any name `node:crypto` knows. @default 'sha256' */
  algorithm: string;
  /** The header carrying the signature (any case), such as `'x-signature'`. Give this or `field`. */
  header: string | undefined;
  /**
   * The body field carrying the signature, such as `'hash'`. The signed text is then the body's JSON without
   * that field (`over: 'json'` only). Give this or `header`.
   */
  field: string | undefined;
  /** How the signature is written: `'hex'` or `'base64'` (base64url is accepted too). @default 'hex' */
  encoding: 'hex' | 'base64';
  /**
   * What is signed: `'json'`, the body as `JSON.stringify(req.body)` writes it (the service's own example);
   * `'raw'`, the body's bytes as they arrived (needs the router to read the body: no global body parser, or
   * one that keeps the bytes on `req.rawBody` as a Buffer, as Firebase Functions does).
   * @default 'json'
   */
  over: 'json' | 'raw';
}

/**
 * An `authenticate` function that checks an HMAC signature of the body, in constant time: the service's
 * documentation says it *may* send an HMAC-SHA256 of `JSON.stringify(req.body)` with a shared secret,
 * hex-encoded, in a header. A `sha256=` style prefix on the signature is allowed.
 *
 * @example
 * import { hmacAuthenticator, ipnRouter } from 'ipn-kit';
 *
 * const ipn = ipnRouter({
 *   authenticate: hmacAuthenticator({ secret: process.env.IPN_HMAC_SECRET, header: 'x-signature' }),
 * });
 */
export function hmacAuthenticator(options: Partial<HmacOptions> & Pick<HmacOptions, 'secret'>): Authenticate {
  const { secrets, algorithm, header, field, encoding, over } = resolveHmacOptions(options);
  return (input) => {
    const given = signatureOf(input, header, field, encoding, algorithm);
    const text = signedText(input, field, over);
    if (given === undefined || text === undefined) return false;
    let match = false;
    for (const secret of secrets) {
      const expected = createHmac(algorithm, secret).update(text).digest();
      // Compared only at equal length (the length of a digest is no secret), and against every secret.
      match = (given.length === expected.length && timingSafeEqual(given, expected)) || match;
    }
    return match;
  };
}

/** The signature's bytes, or `undefined` when it is missing or not in the expected encoding. */
function signatureOf(
  input: AuthenticateInput,
  header: string | undefined,
  field: string | undefined,
  encoding: 'hex' | 'base64',
  algorithm: string,
): Buffer | undefined {
  const value = header === undefined ? input.record[field as string] : input.headers[header];
  if (typeof value !== 'string') return undefined;
  const prefix = `${algorithm}=`;
  const text = value.trim().toLowerCase().startsWith(prefix)
    ? value.trim().slice(prefix.length)
    : value.trim();
  if (encoding === 'hex') return /^(?:[0-9a-fA-F]{2})+$/.test(text) ? Buffer.from(text, 'hex') : undefined;
  return /^[A-Za-z0-9+/_-]+={0,2}$/.test(text) ? Buffer.from(text, 'base64') : undefined;
}

/** The text the service signed, or `undefined` when it cannot be computed from this request. */
function signedText(
  input: AuthenticateInput,
  field: string | undefined,
  over: 'json' | 'raw',
): Buffer | string | undefined {
  if (over === 'raw') return input.rawBody;
  const { body } = input;
  if (typeof body !== 'object' || body === null) return undefined;
  if (field === undefined) return JSON.stringify(body);
  const rest = Object.fromEntries(Object.entries(body).filter(([key]) => key !== field));
  return JSON.stringify(rest);
}

function resolveHmacOptions(options: Partial<HmacOptions>) {
  const fail = (message: string): never => {
    throw new TypeError(`hmacAuthenticator: ${message}`);
  };
  const { secret, algorithm = 'sha256', header, field, encoding = 'hex', over = 'json' } = options ?? {};
  const secrets = (Array.isArray(secret) ? secret : [secret]) as unknown[];
  if (
    secrets.length === 0 ||
    secrets.some((item) => !(typeof item === 'string' || Buffer.isBuffer(item)) || item.length === 0)
  )
    fail('secret must be a non-empty string or Buffer (or an array of them, during a rotation)');
  if (!getHashes().includes(algorithm)) fail(`algorithm ${algorithm} is not a hash node:crypto knows`);
  if ((header === undefined) === (field === undefined))
    fail("give the signature's place: header (such as 'x-signature') or field (such as 'hash'), one of them");
  if (encoding !== 'hex' && encoding !== 'base64')
    fail(`encoding must be 'hex' or 'base64', got ${String(encoding)}`);
  if (over !== 'json' && over !== 'raw') fail(`over must be 'json' or 'raw', got ${String(over)}`);
  if (field !== undefined && over === 'raw')
    fail("a signature in a body field cannot sign the raw body that holds it: use over: 'json'");
  return {
    secrets: secrets as Array<string | Buffer>,
    algorithm,
    header: header?.toLowerCase(),
    field,
    encoding,
    over,
  };
}
