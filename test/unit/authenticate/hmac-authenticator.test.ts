import { createHmac } from 'node:crypto';
import { hmacAuthenticator } from '../../../lib/index.js';
import type { AuthenticateInput } from '../../../lib/authenticate/authenticate.js';

const SECRET = 'shared-secret-from-the-service';
const RAW = '{"transaction_id":"EFB.004217","amount":1000,"state":"SUCCESS","custom_data":"order-2001"}';

/** Independent vectors: what the service's documented example computes, with node:crypto directly. */
const vector = (text: string, encoding: 'hex' | 'base64' = 'hex', secret = SECRET, algorithm = 'sha256') =>
  createHmac(algorithm, secret).update(text).digest(encoding);

function input(overrides: Partial<AuthenticateInput> & { raw?: string } = {}): AuthenticateInput {
  const raw = overrides.raw ?? RAW;
  const body = JSON.parse(raw) as Record<string, unknown>;
  return { rawBody: Buffer.from(raw), body, token: undefined, headers: {}, record: body, ...overrides };
}

describe('hmacAuthenticator', () => {
  test('accepts the hex HMAC-SHA256 of JSON.stringify(body) in a header, as the service documents it', () => {
    const check = hmacAuthenticator({ secret: SECRET, header: 'X-Signature' });
    const body = JSON.parse(RAW) as object;
    expect(check(input({ headers: { 'x-signature': vector(JSON.stringify(body)) } }))).toBe(true);
  });

  test('computes the JSON form from the body, not the raw text: spacing on the wire does not matter', () => {
    const spaced = '{ "transaction_id": "EFB.004217", "amount": 1000, "state": "SUCCESS" }';
    const check = hmacAuthenticator({ secret: SECRET, header: 'x-signature' });
    const signature = vector('{"transaction_id":"EFB.004217","amount":1000,"state":"SUCCESS"}');
    expect(check(input({ raw: spaced, headers: { 'x-signature': signature } }))).toBe(true);
  });

  test("over: 'raw' signs the bytes as they arrived", () => {
    const spaced = '{ "transaction_id": "EFB.004217", "amount": 1000 }';
    const check = hmacAuthenticator({ secret: SECRET, header: 'x-signature', over: 'raw' });
    expect(check(input({ raw: spaced, headers: { 'x-signature': vector(spaced) } }))).toBe(true);
    const compact = vector('{"transaction_id":"EFB.004217","amount":1000}');
    expect(check(input({ raw: spaced, headers: { 'x-signature': compact } }))).toBe(false);
    expect(check(input({ rawBody: undefined, headers: { 'x-signature': vector(spaced) } }))).toBe(false);
  });

  test('base64, sha512 and a sha256= prefix', () => {
    const body = JSON.stringify(JSON.parse(RAW));
    const b64 = hmacAuthenticator({ secret: SECRET, header: 'x-sig', encoding: 'base64' });
    expect(b64(input({ headers: { 'x-sig': vector(body, 'base64') } }))).toBe(true);
    expect(b64(input({ headers: { 'x-sig': vector(body, 'hex') } }))).toBe(false);
    const sha512 = hmacAuthenticator({ secret: SECRET, header: 'x-sig', algorithm: 'sha512' });
    expect(sha512(input({ headers: { 'x-sig': vector(body, 'hex', SECRET, 'sha512') } }))).toBe(true);
    const prefixed = hmacAuthenticator({ secret: SECRET, header: 'x-sig' });
    expect(prefixed(input({ headers: { 'x-sig': `sha256=${vector(body)}` } }))).toBe(true);
  });

  test('a signature in the body field hash signs the JSON text of the body without that field', () => {
    const unsigned = { transaction_id: 'EFB.004217', amount: 1000, state: 'SUCCESS' };
    const hash = vector(JSON.stringify(unsigned));
    const raw = JSON.stringify({ ...unsigned, hash });
    const check = hmacAuthenticator({ secret: SECRET, field: 'hash' });
    expect(check(input({ raw }))).toBe(true);
    expect(check(input({ raw: JSON.stringify({ ...unsigned, amount: 100000, hash }) }))).toBe(false);
  });

  test('refuses a wrong secret, a missing or malformed signature, and a forged amount', () => {
    const check = hmacAuthenticator({ secret: SECRET, header: 'x-signature' });
    const body = JSON.stringify(JSON.parse(RAW));
    expect(check(input({ headers: { 'x-signature': vector(body, 'hex', 'another-secret') } }))).toBe(false);
    expect(check(input({ headers: {} }))).toBe(false);
    expect(check(input({ headers: { 'x-signature': 'zz-not-hex' } }))).toBe(false);
    expect(check(input({ headers: { 'x-signature': vector(body).slice(0, 20) } }))).toBe(false);
    const forged = RAW.replace('1000', '900000');
    expect(check(input({ raw: forged, headers: { 'x-signature': vector(body) } }))).toBe(false);
  });

  test('accepts any secret of a rotation', () => {
    const check = hmacAuthenticator({ secret: ['old-secret-xx', SECRET], header: 'x-signature' });
    const body = JSON.stringify(JSON.parse(RAW));
    expect(check(input({ headers: { 'x-signature': vector(body) } }))).toBe(true);
    expect(check(input({ headers: { 'x-signature': vector(body, 'hex', 'old-secret-xx') } }))).toBe(true);
  });

  test.each([
    [{ secret: '', header: 'x' }, /secret must be/],
    [{ secret: SECRET }, /header .* or field/],
    [{ secret: SECRET, header: 'x', field: 'hash' }, /header .* or field/],
    [{ secret: SECRET, header: 'x', algorithm: 'md-nope' }, /algorithm md-nope/],
    [{ secret: SECRET, field: 'hash', over: 'raw' as const }, /use over: 'json'/],
    [{ secret: SECRET, header: 'x', encoding: 'latin1' as 'hex' }, /encoding must be/],
  ])('throws a TypeError for a programmer error: %p', (options, message) => {
    expect(() => hmacAuthenticator(options)).toThrow(message);
  });
});
