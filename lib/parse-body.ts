import type { BodyFormat } from './content-type.js';
import { isSafeKey, parseJson, withoutForbiddenKeys } from './safe-json.js';

/** A body turned into a record, or why it could not be. */
export type ParseResult =
  | { ok: true; record: Record<string, unknown> }
  | { ok: false; reason: 'malformed_body' | 'not_an_object'; message: string; received: unknown };

const RECEIVED_EXCERPT = 1024;

/**
 * Parses a raw body (bytes read by the router, or a string or Buffer left by the host's own text/raw parser)
 * as JSON or as a url-encoded form. The result is a plain object with no prototype-polluting keys.
 */
export function parseBody(raw: Buffer | string, format: BodyFormat, charset = 'utf-8'): ParseResult {
  const text = withoutBom(typeof raw === 'string' ? raw : decode(raw, charset));
  if (format === 'form') return { ok: true, record: parseForm(text) };
  let value: unknown;
  try {
    value = parseJson(text);
  } catch (error) {
    const detail = text.trim() === '' ? 'the body is empty' : (error as Error).message;
    return {
      ok: false,
      reason: 'malformed_body',
      message: `the body is not valid JSON: ${detail}`,
      received: excerpt(text),
    };
  }
  return asRecord(value);
}

/**
 * Takes a body the host app already parsed (a global `express.json()` or `express.urlencoded()`): keeps
 * objects, copied without prototype-polluting keys, and parses strings and Buffers like a raw body.
 */
export function parseParsedBody(body: unknown, format: BodyFormat, charset = 'utf-8'): ParseResult {
  if (typeof body === 'string' || Buffer.isBuffer(body)) return parseBody(body, format, charset);
  return asRecord(withoutForbiddenKeys(body));
}

function asRecord(value: unknown): ParseResult {
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
    return { ok: true, record: value as Record<string, unknown> };
  }
  const kind = Array.isArray(value) ? 'an array' : value === null ? 'null' : `a ${typeof value}`;
  return {
    ok: false,
    reason: 'not_an_object',
    message: `the body must be a JSON object, got ${kind}`,
    received: value,
  };
}

/** A repeated key becomes an array, so `state=FAILED&state=SUCCESSFUL` fails validation instead of picking one. */
function parseForm(text: string): Record<string, unknown> {
  const record: Record<string, unknown> = {};
  for (const [key, value] of new URLSearchParams(text)) {
    if (!isSafeKey(key)) continue;
    record[key] = Object.hasOwn(record, key) ? [record[key], value].flat() : value;
  }
  return record;
}

function decode(raw: Buffer, charset: string): string {
  return charset === 'utf-8' || charset === 'utf8'
    ? raw.toString('utf8')
    : new TextDecoder(charset).decode(raw);
}

function withoutBom(text: string): string {
  return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
}

function excerpt(text: string): string {
  return text.length > RECEIVED_EXCERPT ? `${text.slice(0, RECEIVED_EXCERPT)}…` : text;
}
