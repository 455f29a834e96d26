import type { z } from 'zod';
import type { IpnEmitter } from '../delivery/safe-emitter.js';
import type { ListenerContext, ListenerContextOf } from '../delivery/events.js';
import type { Store } from '../stores/store.js';
import type { Inbox, ReconcileResult } from '../delivery/delivery.js';
import type { IpnMetrics } from '../observability/metrics.js';
import type { Options } from '../config/options.js';
import { createIpnCore, type CustomDataOf, type IpnCore } from '../router/ipn-core.js';
import { createNodeHandler, type NodeHandler } from './node-handler.js';

export type { CustomDataOf };

/**
 * A request handler that Express (4 or 5) mounts with `app.use(path, ipn)`, and that `http.createServer(ipn)`
 * takes as it is. Also a typed event emitter.
 */
export interface IpnRouter<C = undefined, X = ListenerContext> extends IpnEmitter<C, X>, NodeHandler {
  /**
   * For a notification that never arrived: asks the service (through the `verify` client's guard) and, when
   * the state is final, delivers the record as a notification, dedupe included (if the notification comes
   * later, it is a resend). Rejects with a `StatusError`, a `StoreError`, or an `IpnKitError` with code
   * `IPN_NO_STATUS_CLIENT` when the router has no `verify` client.
   */
  reconcile(transactionId: string): Promise<ReconcileResult>;
  /** The inbox, for admin tools (`delivery: 'at-least-once'` only; otherwise each call rejects `IPN_NOT_DURABLE`). */
  readonly inbox: Inbox;
  /** What the router has counted so far (received, duplicates, emitted by state, errors, ...): a copy. */
  metrics(): IpnMetrics;
  /** Stops pending retries and recovery and closes the store (when it has a `close`). Call it on shutdown. */
  close(): Promise<void>;
}

/**
 * Creates the IPN endpoint: reads and validates the notification, answers 200 at once, drops resends
 * (same `transaction_id` and `state`), and emits typed events.
 *
 * @example
 * import express from 'express';
 * import { z } from 'zod';
 * import { ipnRouter } from 'ipn-kit';
 *
 * const ipn = ipnRouter({ customData: z.object({ orderId: z.string() }) });
 * ipn.on('successful', (n) => {
 *   if (n.customDataError) return flagForReview(n);
 *   credit(n.customData.orderId, n.amount);
 * });
 * ipn.on('failed', (n) => markFailed(n.custom_data, n.error));
 *
 * const app = express();
 * app.use('/ipn', ipn); // before any global body parser
 *
 * @example
 * // Exactly once on your ledger: with PostgresStore at least once, `db` is inside the delivery's transaction.
 * const ipn = ipnRouter({ store: new PostgresStore({ pool }), delivery: 'at-least-once' });
 * ipn.on('successful', async (n, { db }) => {
 *   await db.query('UPDATE orders SET paid_at = now() WHERE id = $1', [n.custom_data]);
 * });
 */
export function ipnRouter<
  S extends z.core.$ZodType | undefined = undefined,
  St extends Store = Store,
  D extends Options['delivery'] = 'at-most-once',
>(
  options?: Partial<Options<S>> & { store?: St; delivery?: D },
): IpnRouter<CustomDataOf<S>, ListenerContextOf<St, D>> {
  type C = CustomDataOf<S>;
  type X = ListenerContextOf<St, D>;
  const core = createIpnCore(options, () => router);
  const { methods, reconcile, inbox, metrics, close } = core;
  const router: IpnRouter<C, X> = Object.assign(createNodeHandler(core as IpnCore<unknown>), methods, {
    reconcile,
    inbox,
    close,
    metrics,
  });
  return router;
}
