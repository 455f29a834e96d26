import type { AuthenticateInput } from '../authenticate/authenticate.js';
import { parseContentType } from '../body/content-type.js';
import { parseBody, parseParsedBody, type ParseResult } from '../body/parse-body.js';
import { isSupportedEncoding, readBody } from '../body/read-body.js';
import type { InvalidEvent } from '../delivery/events.js';
import type { IpnRequest } from './ipn-outcome.js';

/**
 * What reading a request's body came to: the record (with its bytes when the router read them itself, for
 * `authenticate`), bad input to refuse, or a body something else consumed before the router (a bug of the
 * host app's, answered 500).
 */
export type RecordRead =
  | {
      kind: 'read';
      record: Record<string, unknown>;
      /** The bytes as received, when the router read them, or a host parser kept text or a Buffer. */
      raw: Buffer | string | undefined;
      /** The value a host parser left, when it left one. */
      parsedBody?: unknown;
    }
  | { kind: 'refused'; event: InvalidEvent }
  | { kind: 'consumed' };

/** Reads and parses the body of `request`, at most `limit` bytes of it; bad input is `refused`, never a throw. */
export async function readRecord(request: IpnRequest, limit: number): Promise<RecordRead> {
  const type = parseContentType(request.contentType);
  if (!type.ok) return refused('unsupported_media_type', 415, type.message);
  if ('consumed' in request.body) return { kind: 'consumed' };
  if ('parsed' in request.body) {
    const { parsed } = request.body;
    const raw = typeof parsed === 'string' || Buffer.isBuffer(parsed) ? parsed : undefined;
    return fromParse(parseParsedBody(parsed, type.format, type.charset), raw, parsed);
  }
  if (!isSupportedEncoding(request.contentEncoding)) {
    const message = `content encoding ${request.contentEncoding} is not supported: send gzip, deflate, br or none`;
    return refused('unsupported_media_type', 415, message);
  }
  const declared = Number(request.contentLength);
  const identity = request.contentEncoding === undefined || request.contentEncoding === 'identity';
  if (identity && declared > limit) {
    return refused('body_too_large', 413, `the body is over the ${limit}-byte limit`);
  }
  const read = await readBody(request.body.stream, limit, request.contentEncoding);
  if (!read.ok) return refused(read.reason, read.reason === 'body_too_large' ? 413 : 400, read.message);
  return fromParse(parseBody(read.body, type.format, type.charset), read.body);
}

/** What `authenticate` is given of a request whose record was read. */
export function authenticateInput(
  request: IpnRequest,
  read: RecordRead & { kind: 'read' },
): AuthenticateInput {
  const { raw } = read;
  const rawBody = typeof raw === 'string' ? Buffer.from(raw) : raw;
  return {
    rawBody,
    body: raw === undefined ? read.parsedBody : jsonValueOf(rawBody),
    token: request.token,
    headers: request.headers ?? {},
    record: read.record,
  };
}

function fromParse(parsed: ParseResult, raw: Buffer | string | undefined, parsedBody?: unknown): RecordRead {
  if (parsed.ok) {
    return { kind: 'read', record: parsed.record, raw, parsedBody };
  }
  const { reason, message, issues, received } = parsed;
  const status = reason === 'unsupported_media_type' ? 415 : 400;
  return { kind: 'refused', event: { reason, status, message, issues, received } };
}

function refused(reason: InvalidEvent['reason'], status: number, message: string): RecordRead {
  return { kind: 'refused', event: { reason, status, message, received: undefined } };
}

/** The JSON value of a body, as `JSON.parse` (and so `express.json()`) decodes it; `undefined` if not JSON. */
function jsonValueOf(raw: Buffer | undefined): unknown {
  if (raw === undefined) return undefined;
  try {
    return JSON.parse(raw.toString('utf8')) as unknown;
  } catch {
    return undefined;
  }
}
