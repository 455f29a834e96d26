/// <reference types="node" preserve="true" />
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { z } from 'zod';
import { IpnKitError, messageOf } from './errors.js';
import { guardLogger } from './logger.js';
import type { IpnEmitter } from './safe-emitter.js';
import { createSafeEmitter } from './safe-emitter.js';
import type { Inbox, ReconcileResult } from './delivery.js';
import { createMetrics, type IpnMetrics } from './metrics.js';
import {
  createIpnPipeline,
  DUPLICATE_BODY,
  OK_BODY,
  type IpnOutcome,
  type IpnRequest,
} from './ipn-pipeline.js';
import { tokenOf } from './ipn-url.js';
import { resolveOptions, type Options } from './options.js';

/** The type of `customData` for a given `customData` schema (`undefined` when there is none). */
export type CustomDataOf<S> = S extends z.core.$ZodType ? z.core.output<S> : undefined;

/**
 * A request handler that Express (4 or 5) mounts with `app.use(path, ipn)`, and that `http.createServer(ipn)`
 * takes as it is. Also a typed event emitter.
 */
export interface IpnRouter<C = undefined> extends IpnEmitter<C> {
  (req: IncomingMessage, res: ServerResponse, next?: (error?: unknown) => void): void;
  /**
   * For a notification that never arrived: asks the service (through the `verify` client's guard) and, when
   * the state is final, delivers the record as a notification, dedupe included (if the notification comes
   * later, it is a resend). Rejects with a `StatusError`, a `StoreError`, or an `IpnKitError` with code
   * `IPN_NO_STATUS_CLIENT` when the router has no `verify` client.
   */
  reconcile(transactionId: string): Promise<ReconcileResult>;
  /** The inbox, for admin tools (`delivery: 'at-least-once'` only; otherwise each call rejects `IPN_NOT_DURABLE`). */
  readonly inbox: Inbox;
  /** What the router has counted so far (received, duplicates, emitted by state, errors, ...): a copy. */
  metrics(): IpnMetrics;
  /** Stops pending retries and recovery and closes the store (when it has a `close`). Call it on shutdown. */
  close(): Promise<void>;
}

/**
 * Creates the IPN endpoint: reads and validates the notification, answers 200 at once, drops resends
 * (same `transaction_id` and `state`), and emits typed events.
 *
 * @example
 * import express from 'express';
 * import { z } from 'zod';
 * import { ipnRouter } from 'ipn-kit';
 *
 * const ipn = ipnRouter({ customData: z.object({ orderId: z.string() }) });
 * ipn.on('successful', (n) => {
 *   if (n.customDataError) return flagForReview(n);
 *   credit(n.customData.orderId, n.amount);
 * });
 * ipn.on('failed', (n) => markFailed(n.custom_data, n.error));
 *
 * const app = express();
 * app.use('/ipn', ipn); // before any global body parser
 */
export function ipnRouter<S extends z.core.$ZodType | undefined = undefined>(
  options?: Partial<Options<S>>,
): IpnRouter<CustomDataOf<S>> {
  type C = CustomDataOf<S>;
  const checked = resolveOptions(options);
  const resolved = { ...checked, logger: guardLogger(checked.logger) };
  const verifier = resolved.verify as { stats?: unknown } | undefined;
  const metrics = createMetrics(() => verifier?.stats);
  // Every event is counted on its way out: the counters need no listener of their own.
  const { methods, emit, emitAndWait } = createSafeEmitter<C>(
    resolved.logger,
    () => router,
    metrics.count,
    !resolved.logCustomerData,
  );
  const pipeline = createIpnPipeline<C>(resolved, { emit, emitAndWait }, metrics);

  // A bug of ours, not bad input: log it and report it as an `error` event.
  const internal = (cause: unknown): IpnKitError => {
    const message = `ipn-kit failed to handle a request: ${messageOf(cause)}`;
    const error = new IpnKitError('IPN_INTERNAL', message, { cause });
    resolved.logger.error({ err: error }, error.message);
    return error;
  };
  const onFailure = (cause: unknown): unknown => emit('error', { error: internal(cause) });

  const handler = (req: IncomingMessage, res: ServerResponse, next?: (error?: unknown) => void): void => {
    // Mounted by Express, only the mount path itself is ours; anything below it belongs to the host app.
    if (next && !isMountRoot(req, handler)) {
      // The path only: a query string may carry the IPN address token.
      const path = (req.url ?? '').split('?')[0];
      resolved.logger.debug({ path }, 'ipn-kit passed a request below its mount path on to the app');
      return next();
    }
    void respond(req, res);
  };
  /** One async step per request: even a throw while reading the request becomes a 500, not a crash. */
  const respond = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    let outcome: IpnOutcome;
    try {
      outcome = await pipeline.handle(toIpnRequest(req));
    } catch (cause) {
      const error = internal(cause);
      // Answer 500, so the service resends.
      const body = {
        error: 'internal_error',
        message: 'the notification was not processed: resend it later',
      };
      outcome = { status: 500, body, afterResponse: () => emit('error', { error }) };
    }
    // Never throws: the logger is guarded, listeners are isolated, and send catches what writing throws.
    send(req, res, outcome, onFailure);
  };
  const { reconcile, inbox, close } = pipeline;
  const router: IpnRouter<C> = Object.assign(handler, methods, {
    reconcile,
    inbox,
    close,
    metrics: metrics.snapshot,
  });
  return router;
}

type HostRequest = IncomingMessage & {
  body?: unknown;
  _body?: boolean;
  route?: { path?: unknown; stack?: Array<{ handle?: unknown }> };
};

/**
 * `app.use('/ipn', ipn)` strips the mount path (url `/`). `app.post('/ipn', ipn)` puts the handler in
 * `req.route`, or, wrapped in a function of the host's, a route whose path is the request's. A route that
 * is neither is a stale one: Express leaves `req.route` set after an earlier route called `next()`.
 */
function isMountRoot(req: HostRequest, handler: unknown): boolean {
  const url = req.url ?? '/';
  const end = url.indexOf('?');
  const path = end === -1 ? url : url.slice(0, end);
  if (path === '/' || path === '') return true;
  const { route } = req;
  return (
    route !== undefined &&
    (route.path === path || route.stack?.some((layer) => layer.handle === handler) === true)
  );
}

function toIpnRequest(req: HostRequest): IpnRequest {
  const { headers } = req;
  return {
    method: req.method ?? 'GET',
    contentType: headers['content-type'],
    contentLength: headers['content-length'],
    contentEncoding: headers['content-encoding'],
    token: tokenOf(req.url),
    body: bodyOf(req),
  };
}

/** The stream to read, what a host parser left on `req.body`, or nothing if the stream was drained. */
function bodyOf(req: HostRequest): IpnRequest['body'] {
  // body-parser 1.x (Express 4) sets `_body` once it has parsed the stream.
  if (req._body === true) return { parsed: req.body };
  if (!req.readableEnded) return { stream: req };
  const { body } = req;
  if (body === undefined) return { consumed: true };
  // Express 4's parsers also set `req.body = {}` when they skip a request: a body of more than a padded `{}`
  // that left only `{}` was drained by something else. (Express 5's leave `{}` only for a body that was `{}`.)
  const drained =
    isPlainObject(body) &&
    Object.keys(body).length === 0 &&
    Number(req.headers['content-length']) > PADDED_EMPTY;
  return drained ? { consumed: true } : { parsed: body };
}

/** Bytes beyond which a JSON text cannot be an empty object with some whitespace. */
const PADDED_EMPTY = 64;

function isPlainObject(value: unknown): value is object {
  return typeof value === 'object' && value !== null && Object.getPrototypeOf(value) === Object.prototype;
}

const JSON_TYPE = 'application/json; charset=utf-8';
const FIXED = new Map<object, string>([
  [OK_BODY, JSON.stringify(OK_BODY)],
  [DUPLICATE_BODY, JSON.stringify(DUPLICATE_BODY)],
]);

/** The JSON text of an answer's body; the few fixed ones are written once. */
function payloadOf(body: Record<string, unknown> | undefined): string {
  if (body === undefined) return '';
  return FIXED.get(body) ?? JSON.stringify(body);
}

function send(
  req: IncomingMessage,
  res: ServerResponse,
  outcome: IpnOutcome,
  onFailure: (cause: unknown) => unknown,
): void {
  try {
    if (!res.headersSent && !res.writableEnded) {
      const payload = payloadOf(outcome.body);
      const length = String(Buffer.byteLength(payload));
      const headers = outcome.headers
        ? { ...outcome.headers, 'Content-Type': JSON_TYPE, 'Content-Length': length }
        : { 'Content-Type': JSON_TYPE, 'Content-Length': length };
      res.writeHead(outcome.status, headers);
      res.end(req.method === 'HEAD' ? undefined : payload);
    }
  } catch (cause) {
    onFailure(cause);
  }
  // Events run even if the answer could not be written: a claimed notification must still be delivered.
  try {
    outcome.afterResponse?.();
  } catch (cause) {
    onFailure(cause);
  }
}
