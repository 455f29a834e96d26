/// <reference types="node" preserve="true" />
import { setTimeout as sleep } from 'node:timers/promises';
import type { InitiateOptions } from './fake-provider-initiate.js';
import type { FakeTransaction } from './fake-provider-record.js';
import { ipnForm, oppositeState } from './fake-provider-record.js';
import { styleNotification, type NotificationStyle } from './fake-provider-style.js';

/**
 * How the delivery of one transaction's notification ended.
 * @inline
 */
export interface DeliveryReport {
  /**
   * Every POST sent for the transaction: the first delivery (each `concurrent` copy counts), its resends,
   * the `duplicates` and theirs, and the notification sent first when `outOfOrder` (and its resends).
   */
  attempts: number;
  /** The HTTP status of each POST, in the order the answers came; `0` for a network error or a timeout. */
  statuses: number[];
  /** Whether the real (final-state) notification was answered 200. */
  acknowledged: boolean;
}

/** A report of a delivery that sent nothing (not delivered, or stopped while processing). */
export function emptyReport(): DeliveryReport {
  return { attempts: 0, statuses: [], acknowledged: false };
}

/**
 * What one POST got back: the HTTP status and body text, or status `0` and the reason no answer came. A
 * redirect (3xx) is not followed (the payment service does not follow one either): its status is kept, and
 * `error` says where it pointed.
 */
export interface PostResult {
  status: number;
  body: string;
  error?: string;
  /** Whether the answer was longer than {@link MAX_ANSWER_BYTES} and only its start was read. */
  truncated?: boolean;
}

/** The most of an answer's body read: an endpoint that answers without end must not fill the memory. */
export const MAX_ANSWER_BYTES = 64 * 1024;

/**
 * POSTs a JSON text and reads the answer, up to {@link MAX_ANSWER_BYTES}. Never follows a redirect: fetch
 * would turn the POST into a GET, which an IPN route answers 200, and report a delivery that never
 * happened. Never rejects: a network error, the timeout or `signal` aborting resolve status `0`.
 */
export async function postJson(
  url: string,
  body: string,
  options: { timeoutMs: number; signal?: AbortSignal; headers?: Record<string, string> },
): Promise<PostResult> {
  if (options.signal?.aborted) return { status: 0, body: '', error: 'stopped before sending' };
  const controller = new AbortController();
  // A timer of our own rather than AbortSignal.timeout: cleared at once, so nothing outlives the request.
  const timer = setTimeout(
    () => controller.abort(new Error(`no answer within ${options.timeoutMs} ms`)),
    options.timeoutMs,
  );
  const stop = () => controller.abort(new Error('stopped'));
  options.signal?.addEventListener('abort', stop, { once: true });
  try {
    const response = await fetch(url, {
      method: 'POST',
      headers: { ...options.headers, 'content-type': 'application/json' },
      body,
      redirect: 'manual',
      signal: controller.signal,
    });
    const answer = await readCapped(response, MAX_ANSWER_BYTES);
    const result: PostResult = { status: response.status, ...answer };
    if (response.status >= 300 && response.status < 400) {
      const location = response.headers.get('location');
      result.error = `a redirect${location === null ? '' : ` to ${location}`}, not followed: nothing was delivered`;
    }
    return result;
  } catch (error) {
    return {
      status: 0,
      body: '',
      error: reasonOf(controller.signal.aborted ? controller.signal.reason : error),
    };
  } finally {
    clearTimeout(timer);
    options.signal?.removeEventListener('abort', stop);
  }
}

/** The start of an answer's body, at most `cap` bytes; the rest is not read, and the connection is closed. */
async function readCapped(response: Response, cap: number): Promise<{ body: string; truncated?: true }> {
  if (response.body === null) return { body: '' };
  const reader = (response.body as ReadableStream<Uint8Array>).getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return { body: Buffer.concat(chunks, size).toString('utf8') };
    if (size + value.length > cap) {
      chunks.push(value.subarray(0, cap - size));
      await reader.cancel().catch(() => {});
      return { body: Buffer.concat(chunks, cap).toString('utf8'), truncated: true };
    }
    chunks.push(value);
    size += value.length;
  }
}

/** fetch says only "fetch failed"; the cause says what happened (`connect ECONNREFUSED ...`). */
function reasonOf(error: unknown): string {
  // Duck-typed: fetch's errors may come from another realm (a test runner's), where instanceof fails.
  const { message, cause } = (typeof error === 'object' && error !== null ? error : {}) as {
    message?: unknown;
    cause?: { message?: unknown } | null;
  };
  if (typeof cause?.message === 'string') return cause.message;
  return typeof message === 'string' ? message : String(error);
}

/** Waits `ms`; resolves `false` instead when `signal` aborts first (the provider is closing). */
export async function pause(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return false;
  if (ms <= 0) return true;
  try {
    await sleep(ms, undefined, { signal });
    return true;
  } catch {
    return false;
  }
}

/** How to deliver one notification, and where to record what happened. */
export interface Delivery {
  url: string;
  body: string;
  /** Extra headers of each POST (the signature, with a `hashSecret`). */
  headers?: Record<string, string>;
  resends: number;
  resendIntervalMs: number;
  timeoutMs: number;
  signal: AbortSignal;
  report: DeliveryReport;
  /** Called with the status of every POST, for the provider's counters. */
  onAnswer: (status: number) => void;
}

/** Sends the notification once and records the answer. */
export async function sendOnce(delivery: Delivery): Promise<number> {
  delivery.report.attempts += 1;
  const { status } = await postJson(delivery.url, delivery.body, delivery);
  delivery.report.statuses.push(status);
  delivery.onAnswer(status);
  return status;
}

/**
 * Sends the notification until it is answered 200, as the service does: `copies` POSTs at once first, then
 * one more after each non-200 answer or network error, `resends` times at most. Resolves whether it was
 * acknowledged.
 */
export async function deliverUntilAcknowledged(delivery: Delivery, copies = 1): Promise<boolean> {
  for (let attempt = 0; attempt <= delivery.resends; attempt += 1) {
    if (attempt > 0 && !(await pause(delivery.resendIntervalMs, delivery.signal))) return false;
    if (delivery.signal.aborted) return false;
    const statuses = await Promise.all(
      Array.from({ length: attempt === 0 ? copies : 1 }, () => sendOnce(delivery)),
    );
    if (statuses.includes(200)) return true;
  }
  return false;
}

/**
 * Notifies a processed transaction as `plan` says: the opposite state first when `outOfOrder`, then the real
 * one (`concurrent` copies at once, resent until acknowledged), then `duplicates` one after another, each
 * resent until acknowledged too (as the service resends every notification it got no 200 for: a duplicate
 * answered 503 is resent after `resendIntervalMs`, `resends` times at most).
 */
export async function deliverTransaction(
  transaction: FakeTransaction,
  plan: Pick<InitiateOptions, 'concurrent' | 'duplicates' | 'outOfOrder'>,
  context: Omit<Delivery, 'body' | 'report'> & NotificationStyle,
): Promise<DeliveryReport> {
  const report = emptyReport();
  const delivery = (state: string): Delivery => {
    const { text, headers } = styleNotification(ipnForm(transaction, state), context);
    return { ...context, body: text, headers, report };
  };
  if (plan.outOfOrder === true) {
    await deliverUntilAcknowledged(delivery(oppositeState(transaction.outcome)));
  }
  const real = delivery(transaction.outcome);
  report.acknowledged = await deliverUntilAcknowledged(real, plan.concurrent ?? 1);
  for (let copy = 0; copy < (plan.duplicates ?? 0) && report.acknowledged; copy += 1) {
    if (context.signal.aborted) break;
    await deliverUntilAcknowledged(real, 1);
  }
  return report;
}
