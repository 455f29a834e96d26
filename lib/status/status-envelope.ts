import { z } from 'zod';
import { StatusQueryError, TransactionNotFoundError } from '../shared/errors.js';
import { parseJson } from '../shared/safe-json.js';
import { jsonEntries, repeatedJsonKeys } from '../body/json-entries.js';
import { IDENTITY_FIELDS, ipnNotificationSchema, type IpnNotification } from '../notification/schema.js';

/**
 * A transaction as the status query returns it: the notification's record, read by the same schema (so the
 * same lenient informational fields and the same exact `state` and `custom_data`). Fields the answer left
 * out are `null` (numbers) or `""` (text). `state` may be non-final, such as `PENDING1`.
 */
export type StatusRecord = IpnNotification;

/** `statut_code` arrives as a number or a numeric string. */
const statutCode = z.preprocess(
  (value) => (typeof value === 'string' && /^\s*\d+\s*$/.test(value) ? Number(value) : value),
  z.number().int().optional(),
);

/** The envelope, read leniently: anything beyond these fields is ignored. */
const envelopeSchema = z.looseObject({
  data: z.unknown(),
  message: z.unknown().optional(),
  statut_code: statutCode.catch(undefined),
});

const NOT_FOUND = /transaction\s+not\s+found/i;

/** Answers that look like the service blocking the caller, as HTTP status or `statut_code`. */
const BLOCK_CODES = new Set([429, 403]);

/** An HTTP answer to a status query, as plain values. */
export interface StatusAnswer {
  httpStatus: number;
  body: string;
}

/**
 * Reads the answer to a status query for `transactionId`: the record, or the error to throw. Lenient on the
 * envelope (`data` as one record, an array of records, or a partial record; `statut_code` as a number or a
 * numeric string), exact on which transaction it is about.
 */
export function parseStatusAnswer(
  transactionId: string,
  answer: StatusAnswer,
): StatusRecord | TransactionNotFoundError | StatusQueryError {
  const { httpStatus } = answer;
  const parsed = tryParseJson(answer.body);
  const envelope = parsed.ok ? envelopeSchema.safeParse(parsed.value) : undefined;
  const blockedHttp = BLOCK_CODES.has(httpStatus);
  if (!envelope?.success) {
    const what = parsed.ok ? 'a JSON body that is not the status envelope' : 'a body that is not JSON';
    const hint = httpStatus === 404 ? ' (is baseUrl right? it should end with /api_v1/transaction)' : '';
    return new StatusQueryError(
      transactionId,
      `the status query answered HTTP ${httpStatus} with ${what}${hint}`,
      { httpStatus, retryable: httpStatus >= 500 || blockedHttp, blocked: blockedHttp },
    );
  }
  const { data, statut_code: code } = envelope.data;
  const message = typeof envelope.data.message === 'string' ? envelope.data.message : undefined;
  const failure = { httpStatus, statutCode: code, serviceMessage: message };

  // The service puts its own codes in the body: a block may come as statut_code 429 in an HTTP 200.
  const blocked = blockedHttp || BLOCK_CODES.has(code ?? 0);
  // A failure (5xx, a block) that happens to say "not found" or to list the id is a failure, not a verdict.
  const failing = blocked || httpStatus >= 500 || (code ?? 0) >= 500;
  const unknownId =
    (!failing && code === 404) ||
    (!failing && message !== undefined && NOT_FOUND.test(message)) ||
    (!failing && (code === undefined || code === 200) && holdsOnlyTheId(data, transactionId));
  if (unknownId) return new TransactionNotFoundError(transactionId);
  if (blocked || httpStatus >= 400 || (code !== undefined && code !== 200)) {
    const detail = `HTTP ${httpStatus}, statut_code ${code ?? 'missing'}${message ? `: ${message}` : ''}`;
    return new StatusQueryError(transactionId, `the status query for ${transactionId} failed (${detail})`, {
      ...failure,
      retryable: failing,
      blocked,
    });
  }
  const picked = pickRecord(data, transactionId);
  if (typeof picked === 'string') {
    return new StatusQueryError(transactionId, `the status answer for ${transactionId} ${picked}`, {
      ...failure,
      retryable: false,
    });
  }
  const exact = picked && exactRecord(picked, transactionId, answer.body);
  const read = exact === undefined ? undefined : ipnNotificationSchema.safeParse(exact);
  if (picked === undefined || typeof exact === 'string' || !read?.success) {
    const why =
      typeof exact === 'string'
        ? exact
        : 'holds no usable record of it (data must be a record with its state)';
    return new StatusQueryError(transactionId, `the status answer for ${transactionId} ${why}`, {
      ...failure,
      retryable: false,
    });
  }
  const lacking = LACKABLE.filter(
    (field) => !Object.hasOwn(picked.record, field) || read.data[field] === null,
  );
  if (lacking.length > 0) partial.set(read.data, lacking);
  return read.data;
}

/** The fields a comparison needs that a record may lack (`state` it cannot: it is required). */
const LACKABLE = ['amount', 'custom_data'] as const;

/** Records read from a partial answer, with the fields they lack. */
const partial = new WeakMap<StatusRecord, ReadonlyArray<'amount' | 'custom_data'>>();

/**
 * The fields a comparison needs that the service's answer left out (`amount` missing or unreadable,
 * `custom_data` missing): such a record can neither confirm nor contradict a notification.
 */
export function lackingFields(record: StatusRecord): ReadonlyArray<'amount' | 'custom_data'> {
  return partial.get(record) ?? [];
}

/** Marks a record (decoded from a shared cache) as lacking `fields`, as the answer it came from did. */
export function markLacking(record: StatusRecord, fields: readonly string[]): StatusRecord {
  const lacking = LACKABLE.filter((field) => fields.includes(field));
  if (lacking.length > 0) partial.set(record, lacking);
  return record;
}

/** The record picked from `data`, where it was (`index` in an array), or why none may be taken. */
interface Picked {
  record: Record<string, unknown>;
  index: number | undefined;
}

/**
 * `data` as one record or an array of records: the one about `transactionId`. Exact about which
 * transaction: a record naming another id is never taken, nor one of several records none of which names
 * it; a record without its id is taken only when it is the whole of `data` (a partial answer). Two records of
 * the id that disagree are refused.
 */
function pickRecord(data: unknown, transactionId: string): Picked | string | undefined {
  const items: unknown[] = Array.isArray(data) ? data : [data];
  const matches = items.flatMap((item, index) =>
    isRecord(item) && item.transaction_id === transactionId ? [{ record: item, index }] : [],
  );
  const [first] = matches;
  if (first !== undefined) {
    const disagree = matches.some(({ record }) =>
      (['state', 'amount', 'custom_data'] as const).some(
        (field) => JSON.stringify(record[field]) !== JSON.stringify(first.record[field]),
      ),
    );
    if (disagree) return `holds several records of ${transactionId} that disagree`;
    return { record: first.record, index: Array.isArray(data) ? first.index : undefined };
  }
  const [only] = items;
  if (items.length === 1 && isRecord(only) && !Object.hasOwn(only, 'transaction_id'))
    return { record: only, index: Array.isArray(data) ? 0 : undefined };
  return undefined;
}

/**
 * The picked record named as `transactionId`, with a `custom_data` that came back as a number or decoded JSON
 * as its exact source text (as a notification's is: `JSON.parse` rounds integers above 2^53); or why it
 * cannot be read exactly (an identity field given twice).
 */
function exactRecord(picked: Picked, transactionId: string, body: string): Record<string, unknown> | string {
  const record: Record<string, unknown> = { ...picked.record, transaction_id: transactionId };
  const source = recordSource(body, picked.index);
  if (source !== undefined && repeatedJsonKeys(source, IDENTITY_FIELDS).length > 0)
    return 'is ambiguous: its record gives an identity field (transaction_id, state, custom_data) twice';
  const value = record.custom_data;
  if (source !== undefined && value !== null && value !== undefined && typeof value !== 'string') {
    const entry = jsonEntries(source).find(({ key }) => key === 'custom_data');
    if (entry) record.custom_data = entry.value;
  }
  return record;
}

/** The source text of the record: `data` itself, or its `index`-th element. */
function recordSource(body: string, index: number | undefined): string | undefined {
  const data = jsonEntries(body)
    .filter(({ key }) => key === 'data')
    .at(-1)?.value;
  if (data === undefined) return undefined;
  const source = index === undefined ? data : jsonElements(data)[index];
  return source?.startsWith('{') ? source : undefined;
}

/** The elements of a JSON array text, each as its exact source text. The text is known to be valid JSON. */
function jsonElements(text: string): string[] {
  const elements: string[] = [];
  let depth = 0;
  let start = 1;
  for (let i = 0; i < text.length; i += 1) {
    const char = text[i];
    if (char === '"') {
      for (i += 1; text[i] !== '"'; i += 1) if (text[i] === '\\') i += 1;
    } else if (char === '{' || char === '[') {
      depth += 1;
    } else if (char === '}' || char === ']') {
      if (depth === 1) elements.push(text.slice(start, i).trim());
      depth -= 1;
    } else if (char === ',' && depth === 1) {
      elements.push(text.slice(start, i).trim());
      start = i + 1;
    }
  }
  return elements.filter((element) => element !== '');
}

/** The unknown-id answer: `data` is the id itself, or an array holding only the id. */
function holdsOnlyTheId(data: unknown, transactionId: string): boolean {
  if (data === transactionId) return true;
  return Array.isArray(data) && data.length > 0 && data.every((item) => item === transactionId);
}

function tryParseJson(text: string): { ok: true; value: unknown } | { ok: false } {
  try {
    return { ok: true, value: parseJson(text) };
  } catch {
    return { ok: false };
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
