import type { BodyFormat } from './content-type.js';
import type { FieldIssue } from '../shared/errors.js';
import { jsonEntries, repeatedJsonKeys } from './json-entries.js';
import { isSafeKey, nestsDeeperThan, parseJson, withoutForbiddenKeys } from '../shared/safe-json.js';
import { IDENTITY_FIELDS } from '../notification/schema.js';

/** A body turned into a record, or why it could not be. */
export type ParseResult =
  | { ok: true; record: Record<string, unknown> }
  | {
      ok: false;
      reason: 'malformed_body' | 'not_an_object' | 'invalid_fields' | 'unsupported_media_type';
      message: string;
      issues?: FieldIssue[];
      received: unknown;
    };

const RECEIVED_EXCERPT = 1024;

/**
 * How deep a notification may nest arrays and objects, its own object being the first level. Real ones are
 * one level deep (two when a partner's `custom_data` comes back decoded as JSON), so the bound is generous;
 * a body nested deeper (an unknown field holding arrays within arrays, thousands deep) is refused as
 * `invalid_fields`, before anything downstream copies it recursively and overflows the stack: a durable
 * store's copy, `authenticate`'s `JSON.stringify`, a listener's own.
 */
export const MAX_DEPTH = 64;

/**
 * Parses a raw body (bytes read by the router, or a string or Buffer left by the host's own text/raw parser)
 * as JSON or as a url-encoded form. The result is a plain object with no prototype-polluting keys.
 */
export function parseBody(raw: Buffer | string, format: BodyFormat, charset = 'utf-8'): ParseResult {
  const text = withoutBom(typeof raw === 'string' ? raw : decode(raw, charset));
  // Some HTTP clients label a JSON body as a form (PHP's curl with a string body does): read it as JSON.
  if (format === 'form' && !text.trimStart().startsWith('{')) return parseForm(text);
  // A body labelled neither JSON nor a form (text/plain, octet-stream) is read when it is a JSON object.
  if (format === 'other' && !text.trimStart().startsWith('{')) {
    return {
      ok: false,
      reason: 'unsupported_media_type',
      message: 'the body is neither a JSON object nor a form: send the notification as application/json',
      received: excerpt(text),
    };
  }
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
  const deep = tooDeep(value, text);
  if (deep) return deep;
  const result = asRecord(value);
  if (!result.ok) return result;
  const checked = unambiguous(result.record, repeatedJsonKeys(text, IDENTITY_FIELDS));
  if (checked.ok) keepExactCustomData(checked.record, text);
  return checked;
}

/**
 * A `custom_data` that came back as a number or as decoded JSON is taken as its exact source text:
 * `JSON.parse` rounds integers above 2^53 and decimals, which could name another order.
 */
function keepExactCustomData(record: Record<string, unknown>, text: string): void {
  const value = record.custom_data;
  if (value === null || value === undefined || typeof value === 'string') return;
  const entry = jsonEntries(text).find(({ key }) => key === 'custom_data');
  if (entry) record.custom_data = entry.value;
}

/**
 * Takes a body the host app already parsed (a global `express.json()` or `express.urlencoded()`): keeps
 * objects, copied without prototype-polluting keys, and parses strings and Buffers like a raw body.
 */
export function parseParsedBody(body: unknown, format: BodyFormat, charset = 'utf-8'): ParseResult {
  if (typeof body === 'string' || Buffer.isBuffer(body)) return parseBody(body, format, charset);
  const copy = withoutForbiddenKeys(body);
  const deep = tooDeep(copy, undefined);
  if (deep) return deep;
  const result = asRecord(copy);
  if (!result.ok || format !== 'form') return result;
  // The host's form parser turned a repeated key into an array (or qs brackets into an object).
  const record = result.record;
  return unambiguous(
    record,
    IDENTITY_FIELDS.filter((key) => typeof record[key] === 'object' && record[key] !== null),
  );
}

/**
 * Refuses a body nested more than {@link MAX_DEPTH} levels deep, naming each field that is (or the whole
 * body, `''`, when it is not an object). The `invalid` event receives the record without those fields, so
 * that a listener can serialise it (for a body that is not an object: an excerpt of `text`, when the router
 * read it). `undefined` when the body is within the bound: one walk over it, what every body pays.
 */
function tooDeep(value: unknown, text: string | undefined): ParseResult | undefined {
  if (!nestsDeeperThan(value, MAX_DEPTH)) return undefined;
  const record = isRecord(value) ? value : undefined;
  const paths = record
    ? Object.keys(record).filter((key) => nestsDeeperThan(record[key], MAX_DEPTH - 1))
    : [''];
  const issues = paths.map((path) => ({
    path,
    message: `${path || 'the body'} nests arrays or objects more than ${MAX_DEPTH} levels deep`,
  }));
  const where = record ? ` (in ${paths.join(', ')})` : '';
  return {
    ok: false,
    reason: 'invalid_fields',
    message:
      `the notification nests arrays or objects more than ${MAX_DEPTH} levels deep${where}: real ` +
      'notifications are one or two levels deep, and a copy of this one would overflow the stack',
    issues,
    received: record
      ? Object.fromEntries(Object.entries(record).filter(([key]) => !paths.includes(key)))
      : text === undefined
        ? undefined
        : excerpt(text),
  };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function asRecord(value: unknown): ParseResult {
  if (isRecord(value)) return { ok: true, record: value };
  const kind = Array.isArray(value) ? 'an array' : value === null ? 'null' : `a ${typeof value}`;
  return {
    ok: false,
    reason: 'not_an_object',
    message: `the body must be a JSON object, got ${kind}`,
    received: value,
  };
}

/**
 * A repeated informational key becomes an array of its values; a repeated identity key
 * (`state=FAILED&state=SUCCESSFUL`) is refused rather than resolved by picking one.
 */
function parseForm(text: string): ParseResult {
  const record: Record<string, unknown> = {};
  const repeated = new Set<string>();
  for (const [key, value] of new URLSearchParams(text)) {
    if (!isSafeKey(key)) continue;
    if (Object.hasOwn(record, key)) repeated.add(key);
    record[key] = Object.hasOwn(record, key) ? [record[key], value].flat() : value;
  }
  return unambiguous(
    record,
    IDENTITY_FIELDS.filter((key) => repeated.has(key)),
  );
}

function unambiguous(record: Record<string, unknown>, repeated: readonly string[]): ParseResult {
  if (repeated.length === 0) return { ok: true, record };
  const issues = repeated.map((path) => ({ path, message: `${path} appears more than once` }));
  const message = `the notification is ambiguous: ${issues.map((issue) => issue.message).join('; ')}`;
  return { ok: false, reason: 'invalid_fields', message, issues, received: record };
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
