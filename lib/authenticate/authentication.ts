import type { Authenticate, AuthenticateInput } from './authenticate.js';
import type { Logger } from '../observability/logger.js';
import { createLogThrottle } from '../observability/log-throttle.js';

/** At most one loud log line per this many ms; the ones in between are counted in the next. */
const LOG_EVERY_MS = 60_000;

/**
 * The router's `authenticate` step: runs the partner's function, and says loudly (but at most once a
 * minute) when notifications fail it, since a wrong secret would otherwise silently refuse every payment.
 */
export function createAuthentication(authenticate: Authenticate, logger: Logger, now = Date.now) {
  const throttle = createLogThrottle({ everyMs: LOG_EVERY_MS, now });
  return {
    /** Whether the request passes `authenticate`. A throw is passed on: the core answers 500. */
    async check(input: AuthenticateInput): Promise<boolean> {
      if ((await authenticate(input)) === true) return true;
      const failures = throttle.note();
      if (failures !== undefined) {
        logger.error(
          { failures, event: 'invalid' },
          `ipn-kit refused ${failures} notification(s) that failed authenticate (answered 401) since the last such line: ` +
            'if these are genuine, the secret, header or signed text is wrong and payments are being refused',
        );
      }
      return false;
    },
  };
}
