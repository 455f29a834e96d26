import { messageOf, StatusQueryError } from '../shared/errors.js';

/** What one status request needs: where, with which key, and its limits. */
export interface StatusRequestOptions {
  url: string;
  apiKey: string;
  timeoutMs: number;
  maxResponseBytes: number;
  fetch: typeof fetch;
}

/** The answer to one status request, read within its limits: the HTTP status, `Retry-After` and the body. */
export interface StatusExchange {
  httpStatus: number;
  retryAfter: string | null;
  body: string;
}

/**
 * POSTs `{ api_key, transaction_ids }` once and reads the answer, never trusting the other end:
 *
 * - a redirect is never followed (the key travels in the body): a 3xx is a `StatusQueryError` naming the
 *   `Location`, not retryable, and the request is sent nowhere else;
 * - the body is read up to `maxResponseBytes` (a larger `Content-Length` is refused before reading): past
 *   it, the connection is dropped and the call fails;
 * - `timeoutMs` covers the whole exchange, a body that dribbles in included, whatever the `fetch` given.
 *
 * The API key never appears in what it throws (see {@link withoutKey}).
 */
export async function exchangeStatus(
  transactionId: string,
  options: StatusRequestOptions,
): Promise<StatusExchange> {
  const { url, apiKey, timeoutMs, maxResponseBytes } = options;
  const controller = new AbortController();
  const { signal } = controller;
  const timer = setTimeout(
    () => controller.abort(new Error(`no complete answer within ${timeoutMs} ms (timeoutMs)`)),
    timeoutMs,
  );
  timer.unref(); // the request's own socket keeps the process alive while it runs, not this timer
  // Rejects once aborted: raced with every step, so that a fetch ignoring its signal cannot hang the call.
  const aborted = new Promise<never>((_resolve, reject) => {
    signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true });
  });
  aborted.catch(() => {});
  const fail = (
    message: string,
    retryable: boolean,
    extra: { httpStatus?: number; location?: string } = {},
  ) =>
    new StatusQueryError(transactionId, withoutKey(message, apiKey), {
      retryable,
      httpStatus: extra.httpStatus,
      location: extra.location === undefined ? undefined : withoutKey(extra.location, apiKey),
    });
  try {
    let response: Response;
    try {
      response = await Promise.race([
        options.fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/json' },
          body: JSON.stringify({ api_key: apiKey, transaction_ids: transactionId }),
          redirect: 'manual',
          signal,
        }),
        aborted,
      ]);
    } catch (cause) {
      throw fail(`the status query for ${transactionId} got no answer: ${messageOf(cause)}`, true);
    }
    const httpStatus = response.status;
    if (
      (httpStatus >= 300 && httpStatus < 400) ||
      response.type === 'opaqueredirect' ||
      response.redirected
    ) {
      controller.abort(new Error('redirect refused'));
      const location = response.headers.get('location') ?? undefined;
      const where = location === undefined ? '' : ` to ${location}`;
      throw fail(
        `the status query for ${transactionId} was redirected (HTTP ${httpStatus}${where}): redirects are ` +
          'never followed, because the API key travels in the body; set baseUrl to the address that answers itself',
        false,
        { httpStatus, ...(location === undefined ? {} : { location }) },
      );
    }
    const declared = Number(response.headers.get('content-length') ?? NaN);
    const tooLarge = () =>
      fail(
        `the status answer for ${transactionId} is over maxResponseBytes (${maxResponseBytes} bytes): ` +
          'the connection was dropped; a real status envelope is far smaller (is baseUrl right?)',
        false,
        { httpStatus },
      );
    if (declared > maxResponseBytes) {
      controller.abort(new Error('answer too large'));
      throw tooLarge();
    }
    let body: string;
    try {
      body = await readCapped(response, maxResponseBytes, aborted);
    } catch (cause) {
      if (cause instanceof TooLarge) {
        controller.abort(new Error('answer too large'));
        throw tooLarge();
      }
      throw fail(`the status query for ${transactionId} got no complete answer: ${messageOf(cause)}`, true, {
        httpStatus,
      });
    }
    return { httpStatus, retryAfter: response.headers.get('retry-after'), body };
  } finally {
    clearTimeout(timer);
  }
}

/** Thrown by {@link readCapped} past the cap; the caller turns it into the `StatusQueryError`. */
class TooLarge extends Error {}

/** The body as text, at most `max` bytes; rejects with `TooLarge` past it (the caller drops the connection). */
async function readCapped(response: Response, max: number, aborted: Promise<never>): Promise<string> {
  if (response.body === null) return '';
  const reader = (response.body as ReadableStream<Uint8Array>).getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    for (;;) {
      const read: { done: boolean; value?: Uint8Array } = await Promise.race([reader.read(), aborted]);
      if (read.done || read.value === undefined) break;
      const { value } = read;
      total += value.byteLength;
      if (total > max) throw new TooLarge();
      chunks.push(value);
    }
  } catch (error) {
    reader.cancel().catch(() => {});
    throw error;
  }
  return Buffer.concat(chunks, total).toString('utf8');
}

/** `text` with the API key replaced: what the other end echoes (a `Location`, a message) must not leak it. */
export function withoutKey(text: string, apiKey: string): string {
  return apiKey.length > 0 && text.includes(apiKey) ? text.split(apiKey).join('[api key]') : text;
}

/** Loopback hosts, where `http:` cannot be intercepted on the way: tests and a local fake service. */
export function isLoopback(hostname: string): boolean {
  const host = hostname.toLowerCase();
  return (
    host === 'localhost' ||
    host.endsWith('.localhost') ||
    host === '[::1]' ||
    /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host)
  );
}
