import { messageOf } from '../shared/errors.js';
import type { AdminSource } from './admin-options.js';

/** One `rejected` or `error` event as the page lists it. */
export interface RecentEvent {
  at: Date;
  kind: 'rejected' | 'error';
  transactionId: string | undefined;
  state: string | undefined;
  /** The rejection's reason, or the error's code. */
  reason: string;
  message: string;
  /** The notification the event carried, if any: masked when the page shows it. */
  notification: Record<string, unknown> | undefined;
}

/** Keeps the last `size` `rejected` and `error` events of `ipn`, newest first. */
export function createEventRing(ipn: AdminSource, size: number) {
  const events: RecentEvent[] = [];
  const keep = (event: RecentEvent): void => {
    events.unshift(event);
    if (events.length > size) events.pop();
  };
  const recordOf = (value: unknown): Record<string, unknown> | undefined =>
    typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : undefined;
  const text = (value: unknown): string | undefined => (typeof value === 'string' ? value : undefined);
  ipn.on('rejected', (event) => {
    const notification = recordOf(event.notification);
    keep({
      at: new Date(),
      kind: 'rejected',
      transactionId: text(notification?.transaction_id),
      state: text(notification?.state),
      reason: String(event.reason),
      message: event.message,
      notification,
    });
  });
  ipn.on('error', (event) => {
    const notification = recordOf(Reflect.get(event, 'notification'));
    const { error } = event;
    keep({
      at: new Date(),
      kind: 'error',
      transactionId: text(notification?.transaction_id),
      state: text(notification?.state),
      reason: typeof error.code === 'string' ? error.code : 'error',
      message: messageOf(error),
      notification,
    });
  });
  return { recent: (): readonly RecentEvent[] => events };
}
