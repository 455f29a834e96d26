import type { Logger } from './logger.js';
import { createLogThrottle } from './log-throttle.js';

/** How often the warning repeats at most while no request has matched: once an hour. */
export const UNMATCHED_TOKEN_WARN_EVERY_MS = 3_600_000;

/**
 * With `secret`: while no request has carried a matching token since start, every 401 looks like a
 * misconfiguration (the address given to the service is not the one `ipnUrl()` built with this secret)
 * rather than a forgery, and the service's real notifications are being refused one by one. Logs one clear
 * warning saying so at the first such 401, then at most once every `everyMs` while it lasts; never again
 * once a token has matched.
 */
export function createUnmatchedTokenWarning(
  logger: Logger,
  { everyMs = UNMATCHED_TOKEN_WARN_EVERY_MS, now = Date.now }: { everyMs?: number; now?: () => number } = {},
) {
  let matched = false;
  let missing = 0;
  let wrong = 0;
  // Its count is not used: the warning counts every refusal since start, not since the last warning.
  const throttle = createLogThrottle({ everyMs, now });

  return {
    /** A request carried a matching token: the secret works, and 401s are forgeries from now on. */
    matched(): void {
      matched = true;
    },
    /** A request was refused 401, with no token (`missing`) or another one. */
    refused(tokenMissing: boolean): void {
      if (matched) return;
      if (tokenMissing) missing += 1;
      else wrong += 1;
      if (throttle.note() === undefined) return;
      logger.warn(
        { unauthorized: missing + wrong, withoutToken: missing, withOtherToken: wrong },
        `no request to the IPN address has carried the right token since start (${missing + wrong} refused ` +
          `401: ${missing} without a token, ${wrong} with another one): if the payment service sends them, ` +
          'its real notifications are being refused. Likely cause: the `secret` option is not the one the ' +
          "address's token was built with, or the address given to the service lost its ?token=. Build the " +
          'address with ipnUrl(yourUrl, secret) and give that to the service.',
      );
    },
  };
}
