import { z } from 'zod';
import { StatusQueryError, TransactionNotFoundError } from '../pipeline/errors.js';
import { parseJson } from '../pipeline/safe-json.js';
import { ipnNotificationSchema, type IpnNotification } from '../pipeline/schema.js';

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
  const record = pickRecord(data, transactionId);
  const read = record === undefined ? undefined : ipnNotificationSchema.safeParse(record);
  if (!read?.success) {
    return new StatusQueryError(
      transactionId,
      `the status answer for ${transactionId} holds no usable record of it (data must be a record with its state)`,
      { ...failure, retryable: false },
    );
  }
  return read.data;
}

/** `data` as one record or an array of records: the one about `transactionId` (a partial one may omit the id). */
function pickRecord(data: unknown, transactionId: string): Record<string, unknown> | undefined {
  const records = (Array.isArray(data) ? data : [data]).filter(isRecord);
  const record =
    records.find((item) => item.transaction_id === transactionId) ??
    (records.length === 1 && records[0]?.transaction_id === undefined ? records[0] : undefined);
  // A record without its id is taken as the one asked about; one with another id never is.
  return record && { ...record, transaction_id: transactionId };
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
