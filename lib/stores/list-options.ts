import type { DeliveryStatus, ListOptions } from './store.js';

/** Every status an inbox entry can have. */
export const STATUSES: ReadonlySet<string> = new Set<DeliveryStatus>([
  'received',
  'delivered',
  'failed',
  'dead',
]);

/**
 * `list()`'s options checked and with their defaults (limit 100, offset 0, oldest first), the same for
 * every store. `owner` names the store in the messages (`PostgresStore`).
 * @throws TypeError for a bad status, order, limit or offset.
 */
export function checkListOptions(owner: string, options: ListOptions) {
  const { status, limit = 100, offset = 0 } = options;
  if (!Number.isInteger(limit) || limit < 0) {
    throw new TypeError(`${owner}.list: limit must be a whole number, got ${limit}`);
  }
  if (!Number.isInteger(offset) || offset < 0) {
    throw new TypeError(`${owner}.list: offset must be a whole number, got ${offset}`);
  }
  if (status !== undefined && !STATUSES.has(status)) {
    throw new TypeError(
      `${owner}.list: status must be one of ${[...STATUSES].join(', ')}, got ${String(status)}`,
    );
  }
  const { order = 'oldest' } = options;
  if (order !== 'oldest' && order !== 'newest') {
    throw new TypeError(`${owner}.list: order must be 'oldest' or 'newest', got ${String(order)}`);
  }
  return { ...options, status, limit, offset, order };
}
