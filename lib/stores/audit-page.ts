import type { AuditListOptions } from './store.js';

/** The limit and offset of an audit list, defaults applied and bounded. */
export function auditPage(options: AuditListOptions = {}): { limit: number; offset: number } {
  const limit = Math.max(0, Math.min(10_000, Math.floor(options.limit ?? 100)));
  const offset = Math.max(0, Math.floor(options.offset ?? 0));
  return { limit, offset };
}
