import { quiet } from './quiet-logger.js';

/**
 * The at-least-once router options of tests that wait for a retry or a recovery pass: quiet, retried after
 * 20 ms, due entries taken up every 50 ms. Spread into `ipnRouter({ store, ...fastRetries })`.
 */
export const fastRetries = {
  delivery: 'at-least-once',
  logger: quiet,
  retryDelayMs: 20,
  recoveryIntervalMs: 50,
} as const;
