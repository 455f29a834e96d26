import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

/** The cookie holding the page's CSRF token (double submit: every form echoes it in a hidden field). */
export const CSRF_COOKIE = 'ipn_kit_admin_csrf';

const TOKEN = /^[A-Za-z0-9_-]{43}$/;

/** The request's token from its cookie, or `undefined`. */
export function csrfCookieOf(req: IncomingMessage): string | undefined {
  const header = req.headers.cookie ?? '';
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
export function csrfAllows(req: IncomingMessage, field: string | undefined): boolean {
  const site = req.headers['sec-fetch-site'];
  if (site !== undefined && site !== 'same-origin' && site !== 'none') return false;
  const cookie = csrfCookieOf(req);
  if (cookie === undefined || field === undefined) return false;
  const digest = (text: string) => createHash('sha256').update(text).digest();
  return timingSafeEqual(digest(cookie), digest(field));
}
