import type { Readable } from 'node:stream';
import type { StandardSchemaV1 } from '../notification/standard-schema.js';
import { parseContentType } from '../body/content-type.js';
import { toFieldIssues } from '../notification/custom-data.js';
import { createDelivery } from '../delivery/delivery.js';
import { identify, keyOf, type Emitters } from '../delivery/delivery-context.js';
import type { Metrics } from '../observability/metrics.js';
import { loggableError } from '../observability/redact.js';
import { createUnmatchedTokenWarning } from '../observability/unmatched-token-warning.js';
import { BodyUnavailableError, messageOf, StoreError, VerificationBusyError } from '../shared/errors.js';
import type { InvalidEvent } from '../delivery/events.js';
import { matchesSecret } from '../authenticate/ipn-url.js';
import type { ResolvedOptions } from '../config/options.js';
import { parseBody, parseParsedBody, type ParseResult } from '../body/parse-body.js';
import { isSupportedEncoding, readBody } from '../body/read-body.js';
import { ipnNotificationSchema, isFinalState, type IpnNotification } from '../notification/schema.js';
import { createStoreClaimer } from '../delivery/store-claimer.js';
import { within } from '../shared/within.js';
import { createAuthentication } from '../authenticate/authentication.js';

/** A request as the pipeline sees it: no framework objects, only values and the body stream. */
export interface IpnRequest {
  method: string;
  contentType?: string | undefined;
  contentLength?: string | undefined;
  contentEncoding?: string | undefined;
  /** The `token` query parameter of the address, for `secret`. */
  token?: string | undefined;
  /** The request's headers, names in lower case (for `authenticate`). */
  headers?: Readonly<Record<string, string | readonly string[] | undefined>> | undefined;
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
/** What a claim resolves when the router closed while it was in flight. */
const CLOSED = Symbol('closed');

/**
 * The core of the router, over plain values: read the body, parse, validate, dedupe, then answer and emit.
 * Bad input is an outcome (a status and an `invalid` event), never an exception.
 */
export function createIpnPipeline<C>(
  options: ResolvedOptions<StandardSchemaV1 | undefined>,
  emitters: Emitters<C>,
  metrics?: Metrics,
) {
  const { store, ttlMs, limit, logger, storeTimeoutMs } = options;
  const { emit } = emitters;
  const secrets = options.secret === undefined ? undefined : [options.secret].flat();
  const tokenWarning = createUnmatchedTokenWarning(logger);
  const delivery = createDelivery<C>(
    options,
    emitters,
    createStoreClaimer(store, ttlMs, storeTimeoutMs),
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

  const authentication = options.authenticate && createAuthentication(options.authenticate, logger);

  /** A parsed body, with what `authenticate` needs of it: its bytes, when the router read them itself. */
  type Read = ParseResult & { raw?: Buffer | string | undefined; parsedBody?: unknown };

  async function readRecord(request: IpnRequest): Promise<Read | IpnOutcome> {
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
    if ('parsed' in request.body) {
      const { parsed } = request.body;
      const raw = typeof parsed === 'string' || Buffer.isBuffer(parsed) ? parsed : undefined;
      return { ...parseParsedBody(parsed, type.format, type.charset), raw, parsedBody: parsed };
    }
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
    return { ...parseBody(read.body, type.format, type.charset), raw: read.body };
  }

  /** Runs `authenticate` over the body as read; `undefined` when it passes, the 401 otherwise. */
  async function authenticated(
    request: IpnRequest,
    read: Read & { ok: true },
  ): Promise<IpnOutcome | undefined> {
    if (!authentication) return undefined;
    const { raw } = read;
    const rawBody = typeof raw === 'string' ? Buffer.from(raw) : raw;
    const body = raw === undefined ? read.parsedBody : jsonValueOf(rawBody);
    const passed = await authentication.check({
      rawBody,
      body,
      token: request.token,
      headers: request.headers ?? {},
      record: read.record,
    });
    if (passed) return undefined;
    const message = 'the notification failed authentication: its signature is missing or does not match';
    return reject({ reason: 'unauthorized', status: 401, message, received: undefined });
  }

  /**
   * After `close()`: 503, so that the service resends to the instance that replaces this one, and nothing
   * claimed (a claim now would hold the key with nobody left to deliver it).
   */
  let closed = false;
  const inflight = new Set<Promise<unknown>>();
  const track = <T>(pending: Promise<T>): Promise<T> => {
    inflight.add(pending);
    const done = (): void => void inflight.delete(pending);
    pending.then(done, done);
    return pending;
  };
  const closedOutcome = (): IpnOutcome => ({
    status: 503,
    headers: { 'Retry-After': RETRY_AFTER_SECONDS },
    body: {
      error: 'closed',
      message: 'the IPN router is closed (the app is shutting down): resend it later',
    },
  });
  /** Claims, unless the router closed meanwhile: then the claim is undone (the inbox keeps a stored one). */
  async function admit(
    n: IpnNotification,
  ): Promise<{ claimed: boolean | StoreError | VerificationBusyError | typeof CLOSED; leaseId: string }> {
    const accepted = await delivery.accept(n);
    if (!closed || accepted.claimed !== true) return accepted;
    const message = `the store did not release ${keyOf(n)} within ${storeTimeoutMs} ms (storeTimeoutMs) on close`;
    await within(delivery.unclaim(n), storeTimeoutMs, () => new StoreError(message)).catch(
      (error: StoreError) => {
        logger.error({ err: loggableError(error, n), ...identify(n) }, error.message);
        emit('error', { error, notification: n });
      },
    );
    return { claimed: CLOSED, leaseId: accepted.leaseId };
  }

  async function handle(request: IpnRequest): Promise<IpnOutcome> {
    if (request.method === 'GET' || request.method === 'HEAD') return { status: 200, body: OK_BODY };
    if (request.method !== 'POST') {
      const message = `${request.method} is not allowed here: the payment service POSTs notifications`;
      return { status: 405, headers: { Allow: ALLOW }, body: { error: 'method_not_allowed', message } };
    }
    if (closed) return closedOutcome();
    if (secrets) {
      if (!matchesSecret(request.token, secrets)) {
        const missing = request.token === undefined;
        const message = `the IPN address token is ${missing ? 'missing' : 'wrong'}: give the service the address ipnUrl() builds`;
        const outcome = reject({ reason: 'unauthorized', status: 401, message, received: undefined });
        const { afterResponse } = outcome;
        // Besides this request's own line: the one warning that says the secret itself may be wrong.
        outcome.afterResponse = () => {
          afterResponse?.();
          tokenWarning.refused(missing);
        };
        return outcome;
      }
      tokenWarning.matched();
    }
    const parsed = await readRecord(request);
    if ('status' in parsed) return parsed;
    if (!parsed.ok) {
      const { reason, message, issues, received } = parsed;
      const status = reason === 'unsupported_media_type' ? 415 : 400;
      return reject({ reason, status, message, issues, received });
    }
    const refused = await authenticated(request, parsed);
    if (refused) return refused;

    const validated = ipnNotificationSchema.safeParse(parsed.record);
    if (!validated.success) {
      const issues = toFieldIssues(validated.error);
      const message = `the notification is invalid: ${issues.map((i) => `${i.path || 'body'}: ${i.message}`).join('; ')}`;
      return reject({ reason: 'invalid_fields', status: 400, message, issues, received: parsed.record });
    }
    const notification = validated.data;
    metrics?.received();
    if (closed) return closedOutcome();
    // An expected transaction is checked before the claim: a contradicting copy must not take the key.
    const expected = await delivery.expectations.check(notification);
    if (expected.kind === 'mismatch') {
      return { status: 200, body: OK_BODY, afterResponse: () => delivery.rejectExpected(expected.event) };
    }
    const { claimed, leaseId } =
      expected.kind === 'error' ? { claimed: expected.error, leaseId: '' } : await track(admit(notification));
    if (claimed === CLOSED) return closedOutcome();
    if (claimed instanceof StoreError) {
      // The driver's error may quote the record (PostgreSQL's "Failing row contains (...)"): redacted.
      const err = options.logCustomerData ? claimed : loggableError(claimed, notification);
      logger.error(
        { err, transaction_id: notification.transaction_id, state: notification.state },
        options.logCustomerData ? claimed.message : (err.message as string),
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
    if (claimed instanceof VerificationBusyError) {
      return {
        status: 503,
        headers: { 'Retry-After': RETRY_AFTER_SECONDS },
        body: {
          error: 'verification_busy',
          message: 'too many notifications are being verified: resend it later',
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
    delivery.expectations.settle(notification, expected);
    if (!isFinalState(notification.state)) {
      // Only `notification` is emitted for it: say so loudly, or a new success spelling is a lost payment.
      metrics?.unknownState();
      logger.warn(
        { transaction_id: notification.transaction_id, state: notification.state },
        `IPN in state ${notification.state}, neither SUCCESSFUL nor FAILED: emitted as notification only, never as a success`,
      );
    }
    return { status: 200, body: OK_BODY, afterResponse: () => delivery.dispatch(notification, leaseId) };
  }

  return {
    handle,
    reconcile: (transactionId: string) => delivery.reconcile(transactionId),
    expect: (...args: Parameters<typeof delivery.expect>) => delivery.expect(...args),
    sweep: () => delivery.sweep(),
    inbox: delivery.inbox,
    /**
     * Answers 503 from now on, waits for the claims in flight (each bounded by `storeTimeout`), stops
     * retries and recovery, then closes the store, if it has a `close`, waiting for it at most
     * `storeTimeout`: a `close()` that never settles is reported (`error`), not waited on forever.
     */
    close: async (): Promise<void> => {
      closed = true;
      await Promise.allSettled([...inflight]);
      delivery.close();
      try {
        const message = `the store's close() did not settle within ${storeTimeoutMs} ms (storeTimeoutMs)`;
        await within(
          Promise.resolve().then(() => store.close?.()),
          storeTimeoutMs,
          () => new StoreError(message),
        );
      } catch (cause) {
        const error =
          cause instanceof StoreError
            ? cause
            : new StoreError(`the store's close() failed: ${messageOf(cause)}`, { cause });
        logger.error({ err: loggableError(error, undefined) }, error.message);
        emit('error', { error });
      }
    },
  };
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
