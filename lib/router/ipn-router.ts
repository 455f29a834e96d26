import type { ReplayFilter, ReplayProgress, ReplayResult } from '../delivery/bulk-replay.js';
import type { StandardSchemaV1 } from '../notification/standard-schema.js';
import type { IpnEmitter } from '../delivery/safe-emitter.js';
import type { ListenerContext, ListenerContextOf } from '../delivery/events.js';
import type { Store } from '../stores/store.js';
import type { Inbox, ReconcileResult } from '../delivery/delivery.js';
import type { ExpectOptions } from '../delivery/expectations.js';
import type { SweepResult } from '../delivery/reconcile-sweep.js';
import type { DrainOptions, DrainResult } from '../delivery/drain-result.js';
import type { IpnMetrics } from '../observability/metrics.js';
import type { Options } from '../config/options.js';
import type { Protection } from '../observability/unprotected-warning.js';
import { createIpnCore, type CloseOptions, type CustomDataOf, type IpnCore } from '../pipeline/ipn-core.js';
import { createNodeHandler, type NodeHandler } from './node-handler.js';
import { createFetchHandler, type FetchContext } from './fetch-handler.js';

export type { CustomDataOf };

/**
 * Where a router keeps its core, for the adapters of other entry points (`ipn-kit/fastify`). A registered
 * symbol: a router made by the CommonJS build still works with the ESM build of the adapter.
 */
const CORE = Symbol.for('ipn-kit.core');

/**
 * What `registerIpnMetrics` (`ipn-kit/prometheus`, which may be another build) calls on a router to have the
 * backlog's age read at each recovery pass even with no `alert` listener: a registered symbol, as `CORE`.
 */
const WATCH_BACKLOG = Symbol.for('ipn-kit.watchBacklog');

/** The core of a router made by {@link ipnRouter}; a `TypeError` for anything else (a programmer error). */
export function coreOf(router: unknown, who: string): IpnCore<unknown> {
  const core = (router as { [CORE]?: IpnCore<unknown> } | null | undefined)?.[CORE];
  if (core === undefined) throw new TypeError(`${who} needs the router ipnRouter() made: { router: ipn }`);
  return core;
}

/**
 * How the router `ipnRouter()` made stands against forged notifications now (see `acknowledgeUnprotected`);
 * `undefined` for anything else. For the operator's page.
 */
export function protectionOf(router: unknown): Protection | undefined {
  return (router as { [CORE]?: IpnCore<unknown> } | null | undefined)?.[CORE]?.protection();
}

/**
 * A request handler that Express (4 or 5) mounts with `app.use(path, ipn)`, and that `http.createServer(ipn)`
 * takes as it is. Also a typed event emitter.
 */
export interface IpnRouter<C = undefined, X = ListenerContext> extends IpnEmitter<C, X>, NodeHandler {
  /**
   * For a notification that never arrived: asks the service (through the `verify` client's guard) and, when
   * the state is final, delivers the record as a notification, dedupe included (if the notification comes
   * later, it is a resend). Rejects with a `StatusError`, a `StoreError`, or an `IpnKitError` with code
   * `IPN_NO_STATUS_CLIENT` when the router has no `verify` client, or `IPN_CLOSED` once `close()` was
   * called (nothing asked, claimed nor written).
   */
  reconcile(transactionId: string): Promise<ReconcileResult>;
  /**
   * Records that you initiated `transactionId` (call it when you start the payment), in the store: a
   * notification that contradicts it (another amount or `custom_data`) is `rejected` without any status
   * query, and if no final notification comes within `reconcileAfterMs`, the sweep asks the service
   * (through `statusClient`, or `verify`), delivers the record as a notification, or reports `stale`.
   * Rejects with `IPN_NO_EXPECTATIONS` when the store keeps no expectations.
   */
  expect(transactionId: string, expectation?: ExpectOptions): Promise<void>;
  /**
   * Runs one reconciliation pass now (the router runs one every `sweepIntervalMs` once `ipn.expect()` was
   * called, or from the start with `statusClient`). Never rejects; a store failure is an `error` event.
   */
  sweep(): Promise<SweepResult>;
  /**
   * One bounded pass of what the router's timers do, for a platform that freezes the function between
   * requests (Vercel, Netlify, Lambda, Cloudflare Workers, Supabase, Firebase), where a timer may never fire:
   * call it from the platform's scheduled invocation (a cron). In order: the inbox's due and abandoned entries
   * are taken up and attempted, batch after batch (at-least-once; the store's leases keep two instances
   * from taking the same entry), the verification retries due by now are run (at-most-once with `verify`),
   * then one sweep pass of the expectations (the store's sweep lock lets one instance sweep at a time).
   *
   * No new batch starts after `budgetMs` (default 10_000); the first inbox batch (50 entries) and the first
   * sweep batch (20) run whatever the budget, and work started is finished (each attempt bounded by
   * `leaseMs`, each store call by `storeTimeoutMs`). Resolves numbers only: see the fields.
   *
   * - A second call while a pass runs on this router joins it: it resolves the same counts, its own budget
   *   ignored. A pass also waits for a recovery batch the timers are running: never two at once.
   * - It starts no timer of the router's, and leaves none of its own: a failed attempt's next one is the
   *   store's next-attempt time, which the next drain (or the timers, where they run) takes up. (A
   *   verification retry, at-most-once, lives in memory only: one that fails again is scheduled as usual.)
   * - Never rejects: a store failure is an `error` event (counted in `metrics().storeErrors`) and makes `left` 1.
   *   Throws a `TypeError` at once for a `budgetMs` that is not a number >= 0.
   * - At-most-once, the inbox counts are 0: only verification retries and the sweep run.
   *
   * @example
   * // A Cron Trigger on Cloudflare Workers: the pass outlives the handler through waitUntil.
   * export default {
   *   fetch: (req: Request, env: Env, ctx: ExecutionContext) => ipn.fetch(req, ctx),
   *   scheduled: (_event: ScheduledController, _env: Env, ctx: ExecutionContext) =>
   *     ctx.waitUntil(ipn.drain({ budgetMs: 20_000 }).then((counts) => console.log(counts))),
   * };
   */
  drain(options?: DrainOptions): Promise<DrainResult>;
  /** The inbox, for admin tools (`delivery: 'at-least-once'` only; otherwise each call rejects `IPN_NOT_DURABLE`). */
  readonly inbox: Inbox;
  /**
   * Bulk replay: delivers again every inbox entry matching the filter (status, received `since` / `until`,
   * `transactionIds`; without a status, every one not yet delivered; never a kept unexpected one), at most
   * `replayRate` a second; `dryRun` only counts. Resolves `{ matched, replayed, keys }`. At-least-once only
   * (otherwise it rejects `IPN_NOT_DURABLE`).
   *
   * @example
   * const { matched } = await ipn.replay({ status: 'dead', since: new Date('2026-11-27'), dryRun: true });
   */
  replay(filter?: ReplayFilter): Promise<ReplayResult>;
  /**
   * Where the entries of a bulk replay stand now, `{ total, delivered, waiting, dead, gone }`, given the
   * `keys` that `replay()` resolved. At-least-once only.
   *
   * @example
   * const { keys } = await ipn.replay({ status: 'dead' });
   * const { delivered, waiting } = await ipn.replayProgress(keys);
   */
  replayProgress(keys: readonly string[]): Promise<ReplayProgress>;
  /**
   * Holds delivery on every instance over the store (the store keeps the flag, across restarts too):
   * notifications are still checked, stored and answered 200; none is delivered until `resume()` on any of
   * them. At-least-once only (otherwise it rejects `IPN_NOT_DURABLE`); a `StoreError` when the store could
   * not keep it (this instance paused all the same).
   */
  pause(): Promise<void>;
  /** Ends `pause()`: what arrived meanwhile is delivered, oldest first. */
  resume(): Promise<void>;
  /**
   * The same endpoint as a Web-standard handler: a WHATWG `Request` in, a `Response` out, with the same
   * statuses, bodies and events. For a Next.js App Router route handler, Hono, Deno, Bun, Cloudflare
   * Workers and any fetch-style server. On a platform that freezes the function once the response is
   * returned, pass its `waitUntil` (Next.js `after`), so the work after the 200 (verification, your
   * listeners, at-least-once bookkeeping) can finish. Never rejects. Needs no `this`: `POST = ipn.fetch`.
   *
   * @example
   * // app/api/ipn/route.ts
   * import { after } from 'next/server';
   * export const POST = (req: Request) => ipn.fetch(req, { waitUntil: after });
   */
  fetch(request: Request, context?: FetchContext): Promise<Response>;
  /** What the router has counted so far (received, duplicates, emitted by state, errors, ...): a copy. */
  metrics(): IpnMetrics;
  /**
   * Call it on shutdown. From now on the router answers 503 (the service resends to the instance that
   * replaces this one) and neither recovery nor `drain()` takes up another inbox entry; it waits for the
   * claims in flight, then for the listeners of the notifications already answered 200 (the service never
   * resends those) and for the inbox batch a drain or recovery was running and the sweep's pass, at most
   * `timeoutMs` (default
   * 10 s; those still running then are reported as an `error` event), stops pending retries and recovery,
   * lets go of the notifications still being verified (their keys released, their expectations due again),
   * waits for the store writes it started itself and the listeners of what it delivered in the background
   * (a verification retry, the sweep, a claim that landed after `storeTimeoutMs`) (at most `timeoutMs`
   * again; those still running then are
   * reported too), and closes the store (when it has a `close`): end your pool only once it resolved. An
   * `ipn.reconcile()` called once `close()` was rejects with code `IPN_CLOSED`.
   * Rejects only with a `TypeError` for a `timeoutMs` that is not a number of
   * milliseconds.
   *
   * @example
   * process.on('SIGTERM', () => {
   *   server.close();
   *   void ipn.close({ timeoutMs: 20_000 }).then(() => process.exit(0));
   * });
   */
  close(options?: CloseOptions): Promise<void>;
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
 * const secret = process.env.IPN_SECRET!; // give the service ipnUrl(yourUrl, { secret }) at initiation
 * const ipn = ipnRouter({ secret, customData: z.object({ orderId: z.string() }) });
 * ipn.on('successful', (n) => {
 *   const order = n.customData && orders.get(n.customData.orderId);
 *   // Only the order's own transaction and amount, once:
 *   if (order?.transactionId !== n.transaction_id || order.amount !== n.amount) return flagForReview(n);
 *   if (order.status !== 'paid') markPaid(order);
 * });
 * ipn.on('failed', (n) => markFailedUnlessPaid(n)); // a FAILED never undoes a paid order
 *
 * const app = express();
 * app.use('/ipn', ipn); // before any global body parser
 *
 * @example
 * // Exactly once on your ledger: with PostgresStore at least once, `db` is inside the delivery's transaction.
 * const ipn = ipnRouter({ store: new PostgresStore({ pool }), delivery: 'at-least-once' });
 * ipn.on('successful', async (n, { db }) => {
 *   const paid = await db.query(
 *     'UPDATE orders SET paid_at = now() WHERE id = $1 AND transaction_id = $2 AND amount = $3 AND paid_at IS NULL',
 *     [n.custom_data, n.transaction_id, n.amount],
 *   );
 *   if (paid.rowCount !== 1) throw new TypeError(`${n.transaction_id} is not the payment of ${n.custom_data}`);
 * });
 */
export function ipnRouter<
  S extends StandardSchemaV1 | undefined = undefined,
  St extends Store = Store,
  D extends Options['delivery'] = 'at-most-once',
>(
  options?: Partial<Options<S>> & { store?: St; delivery?: D },
): IpnRouter<CustomDataOf<S>, ListenerContextOf<St, D>> {
  type C = CustomDataOf<S>;
  type X = ListenerContextOf<St, D>;
  const core = createIpnCore(options, () => router);
  const { methods, reconcile, expect, sweep, drain, inbox, metrics, close } = core;
  const router: IpnRouter<C, X> = Object.assign(createNodeHandler(core as IpnCore<unknown>), methods, {
    fetch: createFetchHandler(core as IpnCore<unknown>),
    reconcile,
    expect,
    sweep,
    drain,
    inbox,
    replay: (filter?: ReplayFilter) => inbox.replayMatching(filter),
    replayProgress: (keys: readonly string[]) => inbox.replayProgress(keys),
    pause: () => inbox.pause(),
    resume: () => inbox.resume(),
    close,
    metrics,
  });
  Object.defineProperty(router, CORE, { value: core });
  Object.defineProperty(router, WATCH_BACKLOG, { value: () => core.alerts.watch() });
  return router;
}
