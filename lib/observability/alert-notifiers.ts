import type { AlertEvent } from './alert-event.js';
import { createLogThrottle } from './log-throttle.js';
import { defaultLogger, guardLogger, type Logger } from './logger.js';
import { messageOf } from '../shared/errors.js';

/**
 * Options of {@link alertWebhook}. `url` is required; each other default is given.
 * @inline
 */
export interface AlertWebhookOptions {
  /**
   * Where each alert is POSTed as JSON: a Slack or Microsoft Teams incoming webhook, or your own endpoint.
   * It is a secret (anyone holding it can post to your channel): it is never logged. `https:`, or `http:` to
   * 127.0.0.1, ::1 or localhost.
   */
  url: string;
  /**
   * The JSON body of an alert. @default `{ text }`, the alert in one line (what Slack and Teams incoming
   * webhooks take): `[ipn-kit] FIRING dead: ... (since ...)`.
   */
  body: (event: AlertEvent) => unknown;
  /** Time limit of each POST, answer included, in ms. @default 5_000 */
  timeoutMs: number;
  /**
   * Most alerts waiting to be sent (one POST at a time); past it, an alert is dropped and counted in a
   * warning. No POST is retried: an alert storm never becomes a request storm. @default 20
   */
  maxQueue: number;
  /** Extra request headers (an `Authorization` for your own endpoint). @default none */
  headers: Record<string, string>;
  /** Where a failed or dropped POST is told (a warning, at most one a minute). @default errors and warnings to `console.error` */
  logger: Logger;
  /** The fetch to use. @default globalThis.fetch */
  fetch: typeof fetch;
}

/**
 * A ready `alert` listener: add it with `ipn.on('alert', notifier)`.
 * @inline
 */
export interface AlertNotifier {
  /** The listener. It returns at once, never throws and never rejects: the router never waits for it. */
  (event: AlertEvent): void;
  /** Resolves once every alert queued so far was sent or given up (for a shutdown or a test). Never rejects. */
  idle(): Promise<void>;
}

/**
 * A listener of `alert` that POSTs each alert as JSON to `url` (Slack and Teams incoming webhooks take the
 * default `{ text }`). It never blocks the router, never throws into it, and is bounded: one POST at a
 * time, each within `timeoutMs`, at most `maxQueue` waiting, none retried. A failed POST is a warning
 * through `logger`, which never shows the URL.
 *
 * @example
 * import { alertWebhook } from 'ipn-kit';
 *
 * ipn.on('alert', alertWebhook({ url: process.env.SLACK_WEBHOOK_URL! }));
 */
export function alertWebhook(
  options: Partial<AlertWebhookOptions> & Pick<AlertWebhookOptions, 'url'>,
): AlertNotifier {
  const {
    url,
    body = (event: AlertEvent) => ({ text: formatAlert(event) }),
    timeoutMs = 5_000,
    maxQueue = 20,
    headers = {},
    fetch: send = globalThis.fetch,
  } = options;
  const logger = guardLogger(options.logger ?? defaultLogger);
  const target = checkUrl(url);
  if (!Number.isInteger(maxQueue) || maxQueue < 1)
    throw new TypeError(`alertWebhook: maxQueue must be a positive integer, got ${String(maxQueue)}`);
  if (typeof timeoutMs !== 'number' || !(timeoutMs > 0 && timeoutMs <= 2 ** 31 - 1))
    throw new TypeError(
      `alertWebhook: timeoutMs must be a positive number of milliseconds, got ${String(timeoutMs)}`,
    );
  if (typeof send !== 'function') throw new TypeError('alertWebhook: no fetch: pass one ({ fetch })');
  const queue: AlertEvent[] = [];
  let sending: Promise<void> | undefined;
  const failures = createLogThrottle({ everyMs: 60_000 });
  const warn = (what: string): void => {
    const count = failures.note();
    if (count === undefined) return;
    logger.warn(
      { host: target.host, count },
      `alertWebhook: ${count} alert(s) not sent to ${target.host}: ${what}`,
    );
  };

  async function post(event: AlertEvent): Promise<void> {
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), timeoutMs);
    timer.unref();
    try {
      const response = await send(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify(body(event)),
        signal: abort.signal,
        redirect: 'manual',
      });
      // The answer's body is not needed; reading it would let a slow server hold the queue past the timeout.
      void response.body?.cancel().catch(() => {});
      if (!response.ok) warn(`the endpoint answered ${response.status}`);
    } catch (cause) {
      warn(
        abort.signal.aborted
          ? `no answer within ${timeoutMs} ms (timeoutMs)`
          : messageOf(cause).replace(url, '[url]'),
      );
    } finally {
      clearTimeout(timer);
    }
  }

  async function drain(): Promise<void> {
    for (let event = queue.shift(); event !== undefined; event = queue.shift()) await post(event);
    sending = undefined;
  }

  const notifier = (event: AlertEvent): void => {
    if (queue.length >= maxQueue) {
      warn(`${maxQueue} were waiting already (maxQueue): this one is dropped`);
      return;
    }
    queue.push(event);
    sending ??= drain();
  };
  return Object.assign(notifier, { idle: () => sending ?? Promise.resolve() });
}

/**
 * A listener of `alert` that writes one log line per alert: `error` when a condition fires, `warn` when it
 * resolves, with its fields (kind, count, since, threshold, value, key, last error).
 *
 * @example
 * import pino from 'pino';
 * import { alertLogger } from 'ipn-kit';
 *
 * ipn.on('alert', alertLogger(pino()));
 */
export function alertLogger(logger: Logger = defaultLogger): (event: AlertEvent) => void {
  const guarded = guardLogger(logger);
  return (event) => {
    const { kind, state, message, since, count, threshold, value, key, lastError } = event;
    const fields = {
      alert: kind,
      state,
      since: since.toISOString(),
      count,
      threshold,
      ...(value === undefined ? {} : { value }),
      ...(key === undefined ? {} : { key }),
      ...(lastError === undefined ? {} : { lastError }),
    };
    if (state === 'firing') guarded.error(fields, `alert firing: ${kind}: ${message}`);
    else guarded.warn(fields, `alert resolved: ${kind}: ${message}`);
  };
}

/**
 * An alert in one line, as {@link alertWebhook} sends it by default: `[ipn-kit] FIRING dead: ... (since
 * 2026-11-28T03:00:00.000Z)`, or `RESOLVED`, with how long the condition lasted.
 */
export function formatAlert(event: AlertEvent): string {
  const lasted = Math.max(0, event.at.getTime() - event.since.getTime());
  const when =
    event.state === 'firing'
      ? `since ${event.since.toISOString()}`
      : `lasted ${Math.round(lasted / 1000)} s, since ${event.since.toISOString()}`;
  return `[ipn-kit] ${event.state === 'firing' ? 'FIRING' : 'RESOLVED'} ${event.kind}: ${event.message} (${when})`;
}

const LOOPBACK = new Set(['127.0.0.1', '[::1]', 'localhost']);

function checkUrl(url: unknown): URL {
  let parsed: URL;
  try {
    parsed = new URL(String(url));
  } catch {
    // Not the URL itself in the message: it is a secret.
    throw new TypeError('alertWebhook: url must be an absolute URL, such as your Slack incoming webhook');
  }
  if (parsed.protocol === 'https:' || (parsed.protocol === 'http:' && LOOPBACK.has(parsed.hostname)))
    return parsed;
  throw new TypeError(`alertWebhook: url must be https: (or http: to loopback), got ${parsed.protocol}`);
}
