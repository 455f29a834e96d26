import type { AuditListOptions } from './store.js';

/**
 * The limit and offset of an audit list, defaults applied and bounded: whole numbers every store's query
 * takes (a NaN is the default, an offset past the safe integers the last of them: an empty page).
 */
export function auditPage(options: AuditListOptions = {}): { limit: number; offset: number } {
  const whole = (value: number | undefined, fallback: number, max: number): number =>
    value === undefined || Number.isNaN(value) ? fallback : Math.max(0, Math.min(max, Math.floor(value)));
  return {
    limit: whole(options.limit, 100, 10_000),
    offset: whole(options.offset, 0, Number.MAX_SAFE_INTEGER),
  };
}
