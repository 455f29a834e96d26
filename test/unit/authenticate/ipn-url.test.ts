import { ipnUrl, matchesSecret, tokenOf } from '../../../lib/authenticate/ipn-url.js';

const SECRET = 'Zx8u3kQm1vB7pL0aR5tY9wE2';

describe('ipnUrl', () => {
  it('adds the secret as the token query parameter', () => {
    expect(ipnUrl('https://shop.example.com/ipn', { secret: SECRET })).toBe(
      `https://shop.example.com/ipn?token=${SECRET}`,
    );
  });

  it('keeps the query parameters already there', () => {
    expect(ipnUrl('https://shop.example.com/ipn?shop=12&lang=fr', { secret: SECRET })).toBe(
      `https://shop.example.com/ipn?shop=12&lang=fr&token=${SECRET}`,
    );
  });

  it('replaces a token already there instead of adding a second one', () => {
    const url = ipnUrl('http://localhost:3000/ipn?token=old', { secret: SECRET });
    expect(url).toBe(`http://localhost:3000/ipn?token=${SECRET}`);
  });

  it('encodes special characters of the secret, and tokenOf reads them back', () => {
    const secret = 'a b&c=d/e+f?g#h%';
    const url = ipnUrl('https://shop.example.com/ipn?shop=1', { secret });
    expect(url).toBe('https://shop.example.com/ipn?shop=1&token=a+b%26c%3Dd%2Fe%2Bf%3Fg%23h%25');
    const { pathname, search } = new URL(url);
    expect(tokenOf(pathname + search)).toBe(secret);
  });

  it.each([['/ipn'], ['shop.example.com/ipn'], ['']])(
    'throws a TypeError for the relative URL %p',
    (base) => {
      expect(() => ipnUrl(base, { secret: SECRET })).toThrow(TypeError);
      expect(() => ipnUrl(base, { secret: SECRET })).toThrow(/^ipnUrl: base must be an absolute URL/);
    },
  );

  it.each([['ftp://shop.example.com/ipn'], ['file:///etc/ipn'], ['javascript:alert(1)']])(
    'throws a TypeError for the non-http(s) URL %p',
    (base) => {
      expect(() => ipnUrl(base, { secret: SECRET })).toThrow(/^ipnUrl: base must be an http\(s\) URL/);
    },
  );

  it('throws a TypeError for an empty secret', () => {
    expect(() => ipnUrl('https://shop.example.com/ipn', { secret: '' })).toThrow(TypeError);
    expect(() => ipnUrl('https://shop.example.com/ipn', { secret: '' })).toThrow(/options\.secret/);
  });

  it('throws a TypeError for a missing secret', () => {
    const untyped = ipnUrl as (base: string, options?: unknown) => string;
    expect(() => untyped('https://shop.example.com/ipn', {})).toThrow(/options\.secret/);
    expect(() => untyped('https://shop.example.com/ipn')).toThrow(/options\.secret/);
  });
});

describe('tokenOf', () => {
  it('reads the token among other query parameters', () => {
    expect(tokenOf('/ipn?token=x&y=1')).toBe('x');
    expect(tokenOf('/ipn?y=1&token=abc')).toBe('abc');
  });

  it('decodes the token', () => {
    expect(tokenOf('/ipn?token=a%2Bb+c')).toBe('a+b c');
  });

  it.each([['/ipn'], ['/ipn?y=1'], ['/ipn?'], ['/ipn?tokens=x'], [undefined]])(
    'is undefined without a token: %p',
    (target) => {
      expect(tokenOf(target)).toBeUndefined();
    },
  );
});

describe('matchesSecret', () => {
  const secrets = ['first-secret-0123456789', SECRET, 'third-secret-abcdefghij'];

  it.each(secrets.map((secret) => [secret]))('is true for any of several secrets: %s', (secret) => {
    expect(matchesSecret(secret, secrets)).toBe(true);
  });

  it('is true for the one secret', () => {
    expect(matchesSecret(SECRET, [SECRET])).toBe(true);
  });

  it.each<[string, string | undefined]>([
    ['undefined', undefined],
    ['a wrong token', 'not-the-secret-at-all-000'],
    ['the empty string', ''],
    ['a prefix of the secret', SECRET.slice(0, -1)],
    ['the secret plus a character', `${SECRET}x`],
    ['the secret in another case', SECRET.toLowerCase()],
  ])('is false for %s', (_what, token) => {
    expect(matchesSecret(token, secrets)).toBe(false);
  });

  it('is false when there are no secrets', () => {
    expect(matchesSecret(SECRET, [])).toBe(false);
  });
});
