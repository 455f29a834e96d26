import { createHmac } from 'node:crypto';

/** How the fake provider writes its notifications: the variants the service's documentation shows. */
export interface NotificationStyle {
  /** How a success is written: `SUCCESSFUL` (most pages) or `SUCCESS` (the IPN configuration page). */
  successState: 'SUCCESSFUL' | 'SUCCESS';
  /** The success message field: `response`, or `reponse` as the documentation's samples spell it. */
  responseField: 'response' | 'reponse';
  /** When given, each notification is signed with it (see {@link styleNotification}). */
  hashSecret: string | undefined;
}

/** The header the fake provider signs notifications in, when given a `hashSecret`. */
export const SIGNATURE_HEADER = 'x-signature';

const hmac = (secret: string, text: string): string =>
  createHmac('sha256', secret).update(text).digest('hex');

/**
 * A notification written in `style`, as the JSON text to POST and its extra headers. With a `hashSecret`:
 * `hash` holds the hex HMAC-SHA256 of the JSON text of the body without `hash`, and the `x-signature`
 * header the hex HMAC-SHA256 of the body as sent, i.e. `JSON.stringify(req.body)` on the receiving side
 * (the documentation's example). `hmacAuthenticator({ secret, field: 'hash' })` and
 * `hmacAuthenticator({ secret, header: 'x-signature' })` check them.
 */
export function styleNotification(
  body: Record<string, unknown>,
  style: NotificationStyle,
): { text: string; headers: Record<string, string> } {
  const styled: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(body)) {
    if (key === 'hash' && style.hashSecret !== undefined) continue;
    const name = key === 'response' ? style.responseField : key;
    styled[name] = key === 'state' && value === 'SUCCESSFUL' ? style.successState : value;
  }
  if (style.hashSecret === undefined) return { text: JSON.stringify(styled), headers: {} };
  styled.hash = hmac(style.hashSecret, JSON.stringify(styled));
  const text = JSON.stringify(styled);
  return { text, headers: { [SIGNATURE_HEADER]: hmac(style.hashSecret, text) } };
}
