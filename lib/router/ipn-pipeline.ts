import type { Readable } from 'node:stream';
import type { z } from 'zod';
import { parseContentType } from '../pipeline/content-type.js';
import { toFieldIssues } from '../pipeline/custom-data.js';
import { createDelivery } from '../delivery/delivery.js';
import type { Emitters } from '../delivery/delivery-context.js';
import type { Metrics } from '../observability/metrics.js';
import { BodyUnavailableError, StoreError } from '../pipeline/errors.js';
import type { InvalidEvent } from '../delivery/events.js';
import { matchesSecret } from '../pipeline/ipn-url.js';
import type { ResolvedOptions } from '../config/options.js';
import { parseBody, parseParsedBody, type ParseResult } from '../pipeline/parse-body.js';
import { isSupportedEncoding, readBody } from '../pipeline/read-body.js';
import { ipnNotificationSchema } from '../pipeline/schema.js';
import { createStoreClaimer } from '../delivery/store-claimer.js';

/** A request as the pipeline sees it: no framework objects, only values and the body stream. */
export interface IpnRequest {
  method: string;
  contentType?: string | undefined;
  contentLength?: string | undefined;
  contentEncoding?: string | undefined;
  /** The `token` query parameter of the address, for `secret`. */
  token?: string | undefined;
  /** The body stream to read, the value a host parser already left on `req.body`, or neither. */
  body: { stream: Readable } | { parsed: unknown } | { consumed: true };
}

/** The answer to give, and what to do once it is given (emit events). */
export interface IpnOutcome {
  status: number;
  headers?: Record<string, string>;
  body?: Record<string, unknown>;
  /**
   * Runs right after the answer is written: listeners never delay the service's 200. May return a promise
   * of the work it started (verification, delivery), which never rejects.
   */
  afterResponse?: () => unknown;
}

const ALLOW = 'GET, HEAD, POST';

/** The two answers nearly every request gets; the adapter writes their JSON once. */
export const OK_BODY: Record<string, unknown> = Object.freeze({ ok: true });
export const DUPLICATE_BODY: Record<string, unknown> = Object.freeze({ ok: true, duplicate: true });
const RETRY_AFTER_SECONDS = '30';

/**
 * The core of the router, over plain values: read the body, parse, validate, dedupe, then answer and emit.
 * Bad input is an outcome (a status and an `invalid` event), never an exception.
 */
export function createIpnPipeline<C>(
  options: ResolvedOptions<z.core.$ZodType | undefined>,
  emitters: Emitters<C>,
  metrics?: Metrics,
) {
  const { store, ttl, limit, logger, storeTimeout } = options;
  const { emit } = emitters;
  const secrets = options.secret === undefined ? undefined : [options.secret].flat();
  const delivery = createDelivery<C>(
    options,
    emitters,
    createStoreClaimer(store, ttl, storeTimeout),
    metrics,
  );

  const reject = (event: InvalidEvent): IpnOutcome => ({
    status: event.status,
    body: { error: event.reason, message: event.message, ...(event.issues ? { issues: event.issues } : {}) },
    afterResponse: () => {
      // Not the message: a JSON syntax error quotes the body, which holds the customer's number and name.
      const fields = event.issues?.map((issue) => issue.path);
      logger.warn(
        { reason: event.reason, status: event.status, fields },
        `rejected an IPN request: ${event.reason}`,
      );
      emit('invalid', event);
    },
  });

  async function readRecord(request: IpnRequest): Promise<ParseResult | IpnOutcome> {
    const type = parseContentType(request.contentType);
    if (!type.ok)
      return reject({
        reason: 'unsupported_media_type',
        status: 415,
        message: type.message,
        received: undefined,
      });
    if ('consumed' in request.body) {
      const error = new BodyUnavailableError();
      logger.error({ err: error }, error.message);
      return {
        status: 500,
        body: { error: 'body_unavailable', message: error.message },
        afterResponse: () => emit('error', { error }),
      };
    }
    if ('parsed' in request.body) return parseParsedBody(request.body.parsed, type.format, type.charset);
    if (!isSupportedEncoding(request.contentEncoding)) {
      const message = `content encoding ${request.contentEncoding} is not supported: send gzip, deflate, br or none`;
      return reject({ reason: 'unsupported_media_type', status: 415, message, received: undefined });
    }
    const declared = Number(request.contentLength);
    const identity = request.contentEncoding === undefined || request.contentEncoding === 'identity';
    if (identity && declared > limit) {
      return reject({
        reason: 'body_too_large',
        status: 413,
        message: `the body is over the ${limit}-byte limit`,
        received: undefined,
      });
    }
    const read = await readBody(request.body.stream, limit, request.contentEncoding);
    if (!read.ok) {
      const status = read.reason === 'body_too_large' ? 413 : 400;
      return reject({ reason: read.reason, status, message: read.message, received: undefined });
    }
    return parseBody(read.body, type.format, type.charset);
  }

  async function handle(request: IpnRequest): Promise<IpnOutcome> {
    if (request.method === 'GET' || request.method === 'HEAD') return { status: 200, body: OK_BODY };
    if (request.method !== 'POST') {
      const message = `${request.method} is not allowed here: the payment service POSTs notifications`;
      return { status: 405, headers: { Allow: ALLOW }, body: { error: 'method_not_allowed', message } };
    }
    if (secrets && !matchesSecret(request.token, secrets)) {
      const message = `the IPN address token is ${request.token === undefined ? 'missing' : 'wrong'}: give the service the address ipnUrl() builds`;
      return reject({ reason: 'unauthorized', status: 401, message, received: undefined });
    }
    const parsed = await readRecord(request);
    if ('status' in parsed) return parsed;
    if (!parsed.ok) {
      const { reason, message, issues, received } = parsed;
      const status = reason === 'unsupported_media_type' ? 415 : 400;
      return reject({ reason, status, message, issues, received });
    }

    const validated = ipnNotificationSchema.safeParse(parsed.record);
    if (!validated.success) {
      const issues = toFieldIssues(validated.error);
      const message = `the notification is invalid: ${issues.map((i) => `${i.path || 'body'}: ${i.message}`).join('; ')}`;
      return reject({ reason: 'invalid_fields', status: 400, message, issues, received: parsed.record });
    }
    const notification = validated.data;
    metrics?.received();
    const { claimed, leaseId } = await delivery.accept(notification);
    if (claimed instanceof StoreError) {
      logger.error(
        { err: claimed, transaction_id: notification.transaction_id, state: notification.state },
        claimed.message,
      );
      return {
        status: 503,
        headers: { 'Retry-After': RETRY_AFTER_SECONDS },
        body: {
          error: 'store_unavailable',
          message: 'the store did not record the notification in time: resend it later',
        },
        afterResponse: () => emit('error', { error: claimed, notification }),
      };
    }
    if (!claimed) {
      return {
        status: 200,
        body: DUPLICATE_BODY,
        afterResponse: () => {
          logger.debug(
            { transaction_id: notification.transaction_id, state: notification.state },
            'IPN resend dropped',
          );
          emit('duplicate', notification);
        },
      };
    }
    return { status: 200, body: OK_BODY, afterResponse: () => delivery.dispatch(notification, leaseId) };
  }

  return {
    handle,
    reconcile: (transactionId: string) => delivery.reconcile(transactionId),
    inbox: delivery.inbox,
    /** Stops retries and recovery, then closes the store, if it has a `close`. */
    close: async (): Promise<void> => {
      delivery.close();
      await store.close?.();
    },
  };
}
