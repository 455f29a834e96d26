/**
 * What the documentation's snippets take for granted: your Express `app`, a router `ipn`, a `logger`, and
 * your own functions (`credit`, `flagForReview`, `alert`). Here they record what they were called with, so
 * that a test can run a snippet and see what it did (test/docs/snippets.test.ts).
 */
import express from 'express';
import { ipnRouter, type IpnNotification, type Logger, type VerifiedField } from 'ipn-kit';

/** Your Express app. */
export const app = express();

/** A router, for the snippets that add listeners or metrics to one. */
export const ipn = ipnRouter({ logger: { debug() {}, info() {}, warn() {}, error() {} } });

/** What your own functions below were called with, in order. */
export const calls: unknown[][] = [];

/** Your logger (pino or anything with debug, info, warn and error). */
export const logger: Logger = {
  debug: () => undefined,
  info: () => undefined,
  warn: () => undefined,
  error: (...args: unknown[]) => void calls.push(['logger.error', ...args]),
};

/** Credits an order: your ledger write. */
export function credit(orderId: string, amount: number | null): void {
  calls.push(['credit', orderId, amount]);
}

/** Puts a payment aside for a person to check. */
export function flagForReview(notification: IpnNotification): void {
  calls.push(['flagForReview', notification.transaction_id]);
}

/** Tells someone that a notification was forged or altered. */
export function alert(
  reason: string,
  mismatches: readonly VerifiedField[],
  notification: IpnNotification,
): void {
  calls.push(['alert', reason, mismatches, notification.transaction_id]);
}
