import type { DurableStore } from '../stores/store.js';
import { checkDuration } from '../config/option-checks.js';

const DAY = 24 * 60 * 60 * 1000;

/**
 * How long a durable inbox keeps what it no longer delivers (the router's `retention` option). Delivered
 * entries are kept `ttlMs` (the dedupe window: a resend within it is still a duplicate), then deleted.
 */
export interface RetentionOptions {
  /**
   * Dead entries are deleted this long after they went dead: longer than delivered ones, since a person must
   * see them (the operator's page, `ipn-kit inbox list --status dead`) and replay them. `Infinity` keeps them.
   * @default 7_776_000_000 (90 days)
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

export const RETENTION_DEFAULTS: RetentionOptions = { deadMs: 90 * DAY, personalDataMs: 30 * DAY };

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

/** What one retention pass did: how many entries it deleted, by status, and how many records it blanked. */
export interface RetentionPass {
  delivered: number;
  dead: number;
  redacted: number;
}

/**
 * One retention pass over `inbox` at `now`: the one rule, which every store runs in its own dialect. Deletes
 * delivered entries older than `ttlMs`, dead ones older than `deadMs`, and blanks the customer's data older
 * than `personalDataMs` (a store without `redact` keeps it). Rejects with the first store failure.
 */
export async function retentionPass(
  inbox: DurableStore,
  ttlMs: number,
  retention: RetentionOptions,
  now = Date.now(),
): Promise<RetentionPass> {
  const before = (ms: number): Date => new Date(now - ms);
  const delivered = await inbox.purge(before(ttlMs));
  const dead = Number.isFinite(retention.deadMs) ? await inbox.purge(before(retention.deadMs), 'dead') : 0;
  const redacted =
    Number.isFinite(retention.personalDataMs) && typeof inbox.redact === 'function'
      ? await inbox.redact(before(retention.personalDataMs))
      : 0;
  return { delivered, dead, redacted };
}
