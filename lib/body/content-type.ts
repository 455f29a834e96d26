/**
 * The body formats the router reads. `other` is a type that does not say JSON (`text/plain`,
 * `application/octet-stream`, none the router knows): the body is read as JSON when it is a JSON object.
 */
export type BodyFormat = 'json' | 'form' | 'other';

/** What a `Content-Type` header allows: a format and a charset, or why it cannot carry the record. */
export type ContentTypeResult =
  | { readonly ok: true; readonly format: BodyFormat; readonly charset: string }
  | { readonly ok: false; readonly message: string };

const FORM = 'application/x-www-form-urlencoded';

/** The last header {@link parseContentType} read, and what it allows (results are never changed). */
let last: { header: string | undefined; result: ContentTypeResult } | undefined;

/**
 * Reads a `Content-Type` header. JSON is `application/json` or any other `x/json` or `x/y+json`, with any
 * charset Node can decode; a form is `application/x-www-form-urlencoded` in UTF-8. No header at all is read
 * as JSON, since that is what the service sends. Any other type is `other` (read as JSON when the body is a
 * JSON object: a 415 for a body the router could read is a payment that never arrives), except `multipart/*`,
 * which cannot carry the record.
 */
export function parseContentType(header: string | undefined): ContentTypeResult {
  // A service sends the same header with every notification: the last one read is answered at once.
  if (last === undefined || last.header !== header) last = { header, result: readContentType(header) };
  return last.result;
}

function readContentType(header: string | undefined): ContentTypeResult {
  if (header === undefined || header.trim() === '') return { ok: true, format: 'json', charset: 'utf-8' };
  const [mediaType = '', ...parameters] = header.split(';');
  const type = mediaType.trim().toLowerCase();
  const charset = charsetOf(parameters);
  if (type.startsWith('multipart/')) {
    return { ok: false, message: `content type ${type} cannot carry a notification: send application/json` };
  }
  const format: BodyFormat =
    type === FORM ? 'form' : /^[\w.+-]+\/(?:[\w.-]+\+)?json$/.test(type) ? 'json' : 'other';
  if (!isSupportedCharset(format, charset)) {
    return { ok: false, message: `charset ${charset} is not supported for ${type}: send utf-8` };
  }
  return { ok: true, format, charset };
}

function charsetOf(parameters: string[]): string {
  for (const parameter of parameters) {
    const [name = '', value = ''] = parameter.split('=');
    if (name.trim().toLowerCase() === 'charset') return value.trim().replace(/^"|"$/g, '').toLowerCase();
  }
  return 'utf-8';
}

function isSupportedCharset(format: BodyFormat, charset: string): boolean {
  if (charset === 'utf-8' || charset === 'utf8') return true;
  // Percent-decoding of a form is defined in UTF-8 only; JSON text can come in any charset Node decodes.
  if (format === 'form') return charset === 'us-ascii';
  try {
    new TextDecoder(charset);
    return true;
  } catch {
    return false;
  }
}
