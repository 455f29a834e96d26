import { randomUUID } from 'node:crypto';
import type { z } from 'zod';
import { createDeliveryContext, identify, keyOf, type Emitters } from './delivery-context.js';
import { createDurableDelivery } from './durable-delivery.js';
import { IpnKitError, StoreError } from '../pipeline/errors.js';
import type { ResolvedOptions } from '../config/options.js';
import { isFinalState, type IpnNotification } from '../pipeline/schema.js';
import type { createStoreClaimer } from './store-claimer.js';
import type { DurableStore, InboxEntry, ListOptions, StatusCounts } from '../stores/store.js';
import type { StatusRecord } from '../status/status-envelope.js';
import { createVerifyQueue } from './verify-queue.js';
import type { Metrics } from '../observability/metrics.js';

type Claimer = ReturnType<typeof createStoreClaimer>;

/** What `ipn.reconcile()` resolves. */
export interface ReconcileResult {
  /** The service's record, whatever its state. */
  record: StatusRecord;
  /** Whether this call emitted the notification's events (false: not final yet, or already handled). */
  emitted: boolean;
}

/** The notification's inbox, for the host's admin tools (with `delivery: 'at-least-once'`). */
export interface Inbox {
  /** Entries matching the filters (status, transaction, text in `custom_data`, dates), oldest first by default. */
  list(options?: ListOptions): Promise<InboxEntry[]>;
  /**
   * How many notifications the inbox holds by status (received at or after `receivedFrom`, when given);
   * `undefined` when the store cannot count (its `countByStatus` is optional).
   */
  countByStatus(receivedFrom?: Date): Promise<StatusCounts | undefined>;
  /** One entry by key (`transaction_id:state`). */
  get(key: string): Promise<InboxEntry | undefined>;
  /** Delivers one entry again, whatever its status (attempts start over). `false` when there is none. */
  replay(key: string): Promise<boolean>;
  /** Delivers every dead entry again. Resolves how many. */
  replayDead(): Promise<number>;
  /** Deletes delivered entries delivered before `before`. Resolves how many. */
  purge(before: Date): Promise<number>;
}

/**
 * What happens to a notification once the router has accepted it: verification (with `verify`), then the
 * events; at-least-once, the inbox's bookkeeping around them (attempts, retries, dead ones, recovery).
 */
export function createDelivery<C>(
  options: ResolvedOptions<z.core.$ZodType | undefined>,
  emitters: Emitters<C>,
  claimer: Claimer,
  metrics?: Metrics,
) {
  const { store, logger, verify, leaseMs } = options;
  const context = createDeliveryContext<C>(options, emitters);
  const durable = options.delivery === 'at-least-once' ? (store as DurableStore) : undefined;
  const durably = durable && createDurableDelivery(context, durable, metrics);
  const verifying = verify && !durable ? createVerifyQueue(context, verify) : undefined;
  const { detach, after } = context;

  function inbox(): DurableStore {
    if (durable) return durable;
    throw new IpnKitError(
      'IPN_NOT_DURABLE',
      "the inbox needs delivery: 'at-least-once' with a durable store, such as new PostgresStore({ pool })",
    );
  }
  const recoverSoon = (): void => {
    if (durably) after(0, durably.recover);
  };

  /** Resolves when the first attempt has settled, listeners included (for a `waitUntil`); never rejects. */
  function dispatch(n: IpnNotification, leaseId: string): Promise<void> {
    if (durably) return detach(durably.deliver(keyOf(n), n, leaseId, 1));
    if (verifying) return verifying.start(n);
    return context.emitNow(n);
  }

  async function settleReconciled(record: IpnNotification, key: string, leaseId: string): Promise<boolean> {
    if (durably) return durably.deliver(key, record, leaseId, 1);
    void context.emitNow(record); // reconcile resolves at once, as before: listeners are not awaited
    return true;
  }

  return {
    /**
     * Claims (or, at-least-once, stores) a notification before the answer: `true` first, `false` a resend.
     * `leaseId` goes to `dispatch`, after the answer.
     */
    async accept(n: IpnNotification): Promise<{ claimed: boolean | StoreError; leaseId: string }> {
      const key = keyOf(n);
      // Only a durable store leases: the at-most-once path makes no lease id.
      const leaseId = durable ? randomUUID() : '';
      const late = (): void => {
        // Answered 503, but the claim went through after all: ours to deliver, or it would be lost.
        logger.warn(identify(n), 'IPN claim landed after storeTimeout: delivered late');
        void dispatch(n, leaseId);
      };
      const receive = durable && (() => durable.receive(key, n, { id: leaseId, ms: leaseMs }));
      const claimed = await claimer.claim(key, late, receive);
      return { claimed, leaseId };
    },

    /** Runs after the answer: verification, then the events. */
    dispatch,

    async reconcile(transactionId: string): Promise<ReconcileResult> {
      if (verify === undefined) {
        throw new IpnKitError(
          'IPN_NO_STATUS_CLIENT',
          'reconcile needs a status client: ipnRouter({ verify: createStatusClient({ baseUrl, apiKey }) })',
        );
      }
      const record = await verify.getStatus(transactionId);
      if (!isFinalState(record.state)) return { record, emitted: false };
      const key = keyOf(record);
      const lease = { id: randomUUID(), ms: leaseMs };
      // The service's own record needs no verification: emitted directly, through the same dedupe.
      const claimed = await claimer.claim(
        key,
        () => void detach(settleReconciled(record, key, lease.id)),
        durable && (() => durable.receive(key, record, lease)),
      );
      if (claimed instanceof StoreError) throw claimed;
      if (!claimed) return { record, emitted: false };
      return { record, emitted: await settleReconciled(record, key, lease.id) };
    },

    inbox: {
      list: async (listOptions) => inbox().list(listOptions),
      get: async (key) => inbox().get(key),
      countByStatus: async (receivedFrom) => {
        const store = inbox();
        return store.countByStatus ? store.countByStatus(receivedFrom) : undefined;
      },
      replay: async (key) => {
        const found = await inbox().replay(key);
        if (found) recoverSoon();
        return found;
      },
      replayDead: async () => {
        const count = await inbox().replayDead();
        if (count > 0) recoverSoon();
        return count;
      },
      purge: async (before) => inbox().purge(before),
    } satisfies Inbox,

    close(): void {
      verifying?.close();
      claimer.close();
      context.close();
    },
  };
}
