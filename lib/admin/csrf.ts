import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

/** The cookie holding the page's CSRF token (double submit: every form echoes it in a hidden field). */
export const CSRF_COOKIE = 'ipn_kit_admin_csrf';

const TOKEN = /^[A-Za-z0-9_-]{43}$/;

/** The token in a request's `Cookie` header, or `undefined`. */
export function readCsrfCookie(cookieHeader: string | undefined): string | undefined {
  const header = cookieHeader ?? '';
  for (const part of header.split(';')) {
    const at = part.indexOf('=');
    if (at !== -1 && part.slice(0, at).trim() === CSRF_COOKIE) {
      const value = part.slice(at + 1).trim();
      return TOKEN.test(value) ? value : undefined;
    }
  }
  return undefined;
}

/** A new random token (256 bits). */
export function newCsrfToken(): string {
  return randomBytes(32).toString('base64url');
}

/** The `Set-Cookie` value that gives the browser `token`: not readable by scripts, never sent cross-site. */
export function csrfCookie(token: string, secure: boolean): string {
  return `${CSRF_COOKIE}=${token}; Path=/; HttpOnly; SameSite=Strict${secure ? '; Secure' : ''}`;
}

/**
 * Whether a state-changing POST may go ahead: its form field `csrf` equals the cookie's token (compared in
 * constant time; the cookie is `SameSite=Strict`, so another site can neither read nor send it), and the
 * browser, when it says where the request comes from (`Sec-Fetch-Site`), says the same origin. `Origin` is
 * not compared with `Host`: a proxy in front of the app may rewrite `Host`.
 */
export function csrfAllows(
  cookieHeader: string | undefined,
  site: string | undefined,
  field: string | undefined,
): boolean {
  if (site !== undefined && site !== 'same-origin' && site !== 'none') return false;
  const cookie = readCsrfCookie(cookieHeader);
  if (cookie === undefined || field === undefined) return false;
  const digest = (text: string) => createHash('sha256').update(text).digest();
  return timingSafeEqual(digest(cookie), digest(field));
}
