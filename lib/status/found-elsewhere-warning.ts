import type { Logger } from '../observability/logger.js';
import { createLogThrottle, type LogThrottle } from '../observability/log-throttle.js';

/** How often the warning repeats at most per pair of accounts (named, found): once an hour. */
export const FOUND_ELSEWHERE_WARN_EVERY_MS = 60 * 60_000;

/**
 * With several API keys: a transaction found under another account than the one named for it. A partner
 * whose `accountOf` (or `ipn.expect(id, { account })`) names the wrong account names it so for every
 * payment: one line per query would flood the log. So per pair (account named, account found): the first
 * one at once, saying what to fix, then at most one line every `everyMs`, with how many there were since.
 * The pairs are the client's accounts' (names it holds keys for), so the throttles kept are few.
 */
export function createFoundElsewhereWarning(
  logger: Logger,
  { everyMs = FOUND_ELSEWHERE_WARN_EVERY_MS, now = Date.now }: { everyMs?: number; now?: () => number } = {},
) {
  const throttles = new Map<string, LogThrottle>();
  /** `id`, named under `named`, was found under `found`. */
  return (id: string, named: string, found: string): void => {
    const pair = JSON.stringify([named, found]);
    let throttle = throttles.get(pair);
    const first = throttle === undefined;
    if (throttle === undefined) {
      throttle = createLogThrottle({ everyMs, now });
      throttles.set(pair, throttle);
    }
    const count = throttle.note();
    if (count === undefined) return;
    const fix =
      `name account ${found} for such transactions (in ipn.expect(id, { account }), the router's accountOf ` +
      `or getStatus(id, { account })): each one costs a query of ${named}'s key first`;
    const fields = { transaction_id: id, account: found, named, count };
    if (first)
      logger.warn(
        fields,
        `transaction ${id} was found under account ${found}, not under ${named}, the account named for it ` +
          `(the expectation, accountOf or the call): the account named is wrong: ${fix}. Said again at most ` +
          'once an hour for this pair of accounts, with a count',
      );
    else
      logger.warn(
        fields,
        `${count} transaction(s) named account ${named} were found under account ${found} since the last such ` +
          `line (the latest: ${id}): the account named is wrong: ${fix}`,
      );
  };
}
