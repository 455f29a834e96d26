import { checkDuration } from './option-checks.js';

const DAY = 24 * 60 * 60 * 1000;

/**
 * The router's `ttlMs` default (7 days): the dedupe window. The CLI, which runs outside the app and does not
 * know its `ttlMs`, takes it unless `--ttl-ms` says otherwise.
 */
export const DEFAULT_TTL_MS = 7 * DAY;

/**
 * How long a durable inbox keeps what it no longer delivers (the router's `retention` option). Delivered
 * entries are kept `ttlMs` (the dedupe window: a resend within it is still a duplicate), then deleted.
 * @inline
 */
export interface RetentionOptions {
  /**
   * Dead entries are deleted this long after they went dead. A dead entry is a payment never credited: by
   * default it is kept until a person replays or purges it (the operator's page, `ipn-kit inbox list --status
   * dead`; the `dead` alert tells at once); give an age (90 days: `7_776_000_000`) to delete them.
   * @default Infinity (kept)
   */
  deadMs: number;
  /**
   * The customer's name and number (`customer_name`, `destination`) are blanked (`""`) in delivered and dead
   * entries received this long ago; amounts, ids and states are kept, for the audit the service asks partners
   * to keep. A dead entry replayed after that is delivered with them blank. `Infinity` never blanks them.
   * @default 2_592_000_000 (30 days)
   */
  personalDataMs: number;
}

export const RETENTION_DEFAULTS: RetentionOptions = { deadMs: Infinity, personalDataMs: 30 * DAY };

/** The `retention` option over its defaults: a `TypeError` for an unknown key or a duration that is no positive number. */
export function checkRetentionOptions(given: unknown): RetentionOptions {
  if (given === undefined) return RETENTION_DEFAULTS;
  if (typeof given !== 'object' || given === null || Array.isArray(given)) {
    throw new TypeError(
      `ipnRouter: retention must be an object ({ deadMs, personalDataMs }), got ${given === null ? 'null' : Array.isArray(given) ? 'an array' : typeof given}`,
    );
  }
  const defined = Object.fromEntries(Object.entries(given).filter(([, value]) => value !== undefined));
  const unknown = Object.keys(defined).filter((key) => !Object.hasOwn(RETENTION_DEFAULTS, key));
  if (unknown.length > 0) {
    throw new TypeError(
      `ipnRouter: unknown retention option ${unknown.join(', ')} (known: deadMs, personalDataMs)`,
    );
  }
  const retention = { ...RETENTION_DEFAULTS, ...(defined as Partial<RetentionOptions>) };
  for (const name of ['deadMs', 'personalDataMs'] as const) {
    if (retention[name] !== Infinity) checkDuration(`retention.${name}`, retention[name]);
  }
  return retention;
}
