import type { AlertOptions } from '../observability/alert-event.js';
import { checkDuration, MAX_TIMER } from './option-checks.js';

const COUNTS = ['failuresInARow', 'failureRatioMinAttempts', 'forgedBurst'] as const;
const DURATIONS = ['failureWindowMs', 'backlogAgeMs', 'forgedWindowMs', 'quietMs'] as const;

/**
 * The `alerts` option over its defaults, checked: a `TypeError` at construction for an unknown key (a typo
 * would leave a threshold at its default unseen), a count that is not a positive integer, a ratio outside
 * (0, 1], or a duration that is not a positive number of milliseconds a timer can hold.
 */
export function checkAlertOptions(defaults: AlertOptions, given: unknown): AlertOptions {
  if (given === undefined) return defaults;
  if (typeof given !== 'object' || given === null || Array.isArray(given)) {
    const what = given === null ? 'null' : Array.isArray(given) ? 'an array' : typeof given;
    throw new TypeError(`ipnRouter: alerts must be an object of thresholds, got ${what}`);
  }
  const defined = Object.fromEntries(Object.entries(given).filter(([, value]) => value !== undefined));
  const unknown = Object.keys(defined).filter((key) => !Object.hasOwn(defaults, key));
  if (unknown.length > 0) {
    throw new TypeError(
      `ipnRouter: unknown alerts option ${unknown.join(', ')} (known: ${Object.keys(defaults).join(', ')})`,
    );
  }
  const alerts: AlertOptions = { ...defaults, ...(defined as Partial<AlertOptions>) };
  for (const name of COUNTS) {
    if (!Number.isInteger(alerts[name]) || alerts[name] < 1)
      throw new TypeError(
        `ipnRouter: alerts.${name} must be a positive integer, got ${String(alerts[name])}`,
      );
  }
  const { failureRatio } = alerts;
  if (typeof failureRatio !== 'number' || !(failureRatio > 0 && failureRatio <= 1))
    throw new TypeError(
      `ipnRouter: alerts.failureRatio must be a number above 0, at most 1, got ${String(failureRatio)}`,
    );
  for (const name of DURATIONS) checkDuration(`alerts.${name}`, alerts[name], MAX_TIMER);
  return alerts;
}
