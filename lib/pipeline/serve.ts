import type { IpnCore } from './ipn-core.js';
import { DUPLICATE_BODY, OK_BODY, type IpnOutcome, type IpnRequest } from './ipn-outcome.js';

/** The one content type of every answer. */
export const JSON_TYPE = 'application/json; charset=utf-8';

/** The few fixed answers' JSON text and its length, made once. */
const FIXED = new Map<object, { payload: string; length: string }>(
  [OK_BODY, DUPLICATE_BODY].map((body) => {
    const payload = JSON.stringify(body);
    return [body, { payload, length: String(Buffer.byteLength(payload)) }];
  }),
);

/** The JSON text of an answer's body; the few fixed ones are written once. */
export function payloadOf(body: Record<string, unknown> | undefined): string {
  if (body === undefined) return '';
  return FIXED.get(body)?.payload ?? JSON.stringify(body);
}

/** An answer ready to write, whatever the transport. */
export interface Reply {
  readonly status: number;
  /** The outcome's headers (`Allow`, `Retry-After`), `Content-Type` and `Content-Length`. */
  readonly headers: Readonly<Record<string, string>>;
  /**
   * The JSON text to send; `undefined` for a HEAD request, whose `Content-Length` is still the length of
   * the text a GET would get.
   */
  readonly body: string | undefined;
}

/**
 * What a transport (node:http, fetch, Fastify) supplies to {@link serve}: a few small functions over its
 * own request and response objects, `In` being the arguments its handler is called with and `Out` what the
 * handler resolves. The flow itself (answering, failures, the work after the answer) is `serve`'s alone.
 */
export interface Transport<In extends unknown[], Out> {
  /** The request as the pipeline sees it. A throw (a getter of the host's) is answered 500. */
  readonly toIpnRequest: (...input: In) => IpnRequest;
  /** Writes the reply and gives what the handler resolves. A throw is reported through `onFailure`. */
  readonly write: (reply: Reply, ...input: In) => Out;
  /** What the handler resolves when `write` threw. */
  readonly unwritten: (...input: In) => Out;
  /**
   * For a transport that may write the answer after `write` returns (Fastify behind a host's async `onSend`
   * hook): a promise of the moment the answer is written or the exchange ended, when it is not yet; the work
   * after the answer starts then, so that a synchronous listener never holds the answer. `undefined` when it
   * is written already. Never rejects.
   */
  readonly written?: (...input: In) => Promise<void> | undefined;
  /**
   * Hands the work after the answer to the platform's `waitUntil`, when this request has one (a serverless
   * function frozen once it answered). Without it, the work runs on: the process stays up. Gives what the
   * platform's `waitUntil` returned: a promise of it that rejects is reported through `onFailure`.
   */
  readonly waitUntil?: (work: Promise<void>, ...input: In) => unknown;
}

/**
 * The one request flow every transport shares: handle (never rejects: a throw while reading the request is
 * a 500 through `core.failure`), write the answer (a failure is reported, and the work after the answer
 * still runs: a claimed notification must still be delivered), then start that work exactly once, tracked,
 * and hand its promise to `waitUntil`. The handler it returns never rejects.
 */
export function serve<In extends unknown[], Out>(
  core: IpnCore<unknown>,
  transport: Transport<In, Out>,
): (...input: In) => Promise<Out> {
  return async (...input) => {
    let head = false;
    let outcome: IpnOutcome;
    try {
      const request = transport.toIpnRequest(...input);
      head = request.method === 'HEAD';
      outcome = await core.handle(request);
    } catch (cause) {
      outcome = core.failure(cause);
    }
    let out: Out;
    try {
      out = transport.write(replyOf(outcome, head), ...input);
    } catch (cause) {
      core.onFailure(cause);
      out = transport.unwritten(...input);
    }
    // Started now, not once the answer is flushed: a frozen function may never run a later timer. Only a
    // transport that says its answer is still on its way (and that runs in a process that stays up) waits.
    let pending: Promise<void> | undefined;
    if (transport.written) {
      try {
        pending = transport.written(...input);
      } catch (cause) {
        core.onFailure(cause);
      }
    }
    let work: Promise<void>;
    if (pending) {
      const start = (): Promise<void> => core.runAfterResponse(outcome);
      work = pending.then(start, start);
    } else work = core.runAfterResponse(outcome);
    if (transport.waitUntil) {
      try {
        const handed = transport.waitUntil(work, ...input);
        // An async waitUntil (a host's queue, a platform's) that refuses the work: reported like a throw,
        // never left an unhandled rejection that would stop the host process.
        if (isThenable(handed)) Promise.resolve(handed).catch(core.onFailure);
      } catch (cause) {
        core.onFailure(cause);
      }
    }
    return out;
  };
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | null)?.then === 'function';
}

/** The reply to write for `outcome` (no body for a HEAD request). */
export function replyOf(outcome: IpnOutcome, head: boolean): Reply {
  const fixed = outcome.body === undefined ? undefined : FIXED.get(outcome.body);
  const payload = fixed?.payload ?? payloadOf(outcome.body);
  const length = fixed?.length ?? String(Buffer.byteLength(payload));
  // A new headers object each time: a host's hook around writeHead may change the one it is given.
  const headers = outcome.headers
    ? { ...outcome.headers, 'Content-Type': JSON_TYPE, 'Content-Length': length }
    : { 'Content-Type': JSON_TYPE, 'Content-Length': length };
  return { status: outcome.status, headers, body: head ? undefined : payload };
}
