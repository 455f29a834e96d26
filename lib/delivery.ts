import { randomUUID } from 'node:crypto';
import type { z } from 'zod';
import { parseCustomData } from './custom-data.js';
import { DeliveryError, IpnKitError, messageOf, StoreError, VerificationError } from './errors.js';
import type { Notification } from './events.js';
import type { ResolvedOptions } from './options.js';
import type { createSafeEmitter } from './safe-emitter.js';
import { FINAL_STATES, ipnNotificationSchema, type IpnNotification } from './schema.js';
import type { createStoreClaimer } from './store-claimer.js';
import type { DurableStore, InboxEntry, ListOptions } from './store.js';
import type { StatusRecord } from './status-envelope.js';
import { verifyNotification, type Verdict } from './verify-notification.js';

type Emitters<C> = Pick<ReturnType<typeof createSafeEmitter<C>>, 'emit' | 'emitAndWait'>;
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
  /** Entries, oldest first, by status. */
  list(options?: ListOptions): Promise<InboxEntry[]>;
  /** One entry by key (`transaction_id:state`). */
  get(key: string): Promise<InboxEntry | undefined>;
  /** Delivers one entry again, whatever its status (attempts start over). `false` when there is none. */
  replay(key: string): Promise<boolean>;
  /** Delivers every dead entry again. Resolves how many. */
  replayDead(): Promise<number>;
  /** Deletes delivered entries delivered before `before`. Resolves how many. */
  purge(before: Date): Promise<number>;
}

/** An attempt's end: `later` covers a verification that could not be made yet. */
type Attempt =
  Exclude<Verdict, { kind: 'confirmed' }> | { kind: 'delivered' } | { kind: 'failed'; error: IpnKitError };

const MAX_VERIFY_DELAY = 10 * 60_000;
const MAX_RETRY_DELAY = 60 * 60_000;
const RECOVERY_BATCH = 50;

const keyOf = (n: IpnNotification): string => `${n.transaction_id}:${n.state}`;
const isFinal = (state: string): boolean => (FINAL_STATES as readonly string[]).includes(state);

/**
 * What happens to a notification once the router has accepted it: verification (with `verify`), then the
 * events; at-least-once, the inbox's bookkeeping around them (attempts, retries, dead ones, recovery).
 */
export function createDelivery<C>(
  options: ResolvedOptions<z.core.$ZodType | undefined>,
  { emit, emitAndWait }: Emitters<C>,
  claimer: Claimer,
) {
  const { store, logger, verify, customData: schema, leaseMs } = options;
  const durable = options.delivery === 'at-least-once' ? (store as DurableStore) : undefined;
  const timers = new Set<NodeJS.Timeout>();
  /** At-most-once with `verify`: notifications of one key awaiting verification, the one being verified first. */
  const candidates = new Map<string, IpnNotification[]>();
  let recovering = false;
  let closed = false;

  const after = (ms: number, run: () => unknown): void => {
    if (closed) return;
    const timer = setTimeout(() => {
      timers.delete(timer);
      run();
    }, ms);
    timer.unref(); // a pending retry never keeps the process alive
    timers.add(timer);
  };
  const report = (error: IpnKitError, notification?: IpnNotification): void => {
    logger.error({ err: error, ...(notification && identify(notification)) }, error.message);
    emit('error', { error, notification });
  };
  const release = (key: string): void => {
    Promise.resolve()
      .then(() => store.release(key))
      .catch((cause: unknown) =>
        report(new StoreError(`the store failed to release ${key}: ${messageOf(cause)}`, { cause })),
      );
  };

  const toEvent = (n: IpnNotification): Notification<C> =>
    (schema ? { ...n, ...parseCustomData(schema, n.custom_data) } : n) as Notification<C>;

  function emitNow(n: IpnNotification): void {
    const event = toEvent(n);
    logger.debug(identify(n), 'IPN notification delivered');
    emit('notification', event);
    if (event.state === 'SUCCESSFUL') emit('successful', event as Notification<C> & { state: 'SUCCESSFUL' });
    else if (event.state === 'FAILED') emit('failed', event as Notification<C> & { state: 'FAILED' });
  }

  /** Emits and waits for every listener: delivered only when at least one ran and none failed. */
  async function emitAndSettle(n: IpnNotification): Promise<Attempt> {
    const event = toEvent(n);
    const own =
      event.state === 'SUCCESSFUL'
        ? emitAndWait('successful', event as Notification<C> & { state: 'SUCCESSFUL' })
        : event.state === 'FAILED'
          ? emitAndWait('failed', event as Notification<C> & { state: 'FAILED' })
          : undefined;
    const results = await Promise.all([emitAndWait('notification', event), own]);
    const ran = results.reduce((sum, result) => sum + (result?.listeners ?? 0), 0);
    if (results.some((result) => result?.ok === false))
      return { kind: 'failed', error: new DeliveryError(`a listener failed for ${keyOf(n)}`) };
    if (ran === 0) {
      const message = `no listener for ${keyOf(n)}: add ipn.on('${event.state === 'FAILED' ? 'failed' : 'successful'}', ...) before the router starts`;
      return { kind: 'failed', error: new DeliveryError(message) };
    }
    return { kind: 'delivered' };
  }

  // ---- at-most-once with verify: the notification is emitted once the service confirms it ----

  async function verifyNext(key: string, attempt: number): Promise<void> {
    const head = candidates.get(key)?.[0];
    if (head === undefined || verify === undefined) return;
    const verdict = await verifyNotification(verify, head);
    if (closed) return;
    if (verdict.kind === 'confirmed') {
      candidates.delete(key);
      emitNow(head);
    } else if (verdict.kind === 'rejected') {
      reject(verdict.event);
      candidates.get(key)?.shift();
      if (candidates.get(key)?.length) void verifyNext(key, 1);
      else {
        candidates.delete(key);
        release(key); // a genuine notification of this key can still come
      }
    } else if (attempt < options.verifyAttempts) {
      const backoff = Math.min(options.verifyRetryDelayMs * 2 ** (attempt - 1), MAX_VERIFY_DELAY);
      after(Math.max(backoff, verdict.retryAfterMs), () => void verifyNext(key, attempt + 1));
    } else {
      candidates.delete(key);
      release(key); // so that a resend or ipn.reconcile() can still deliver it
      giveUp(head, verdict, attempt);
    }
  }

  function reject(event: Extract<Verdict, { kind: 'rejected' }>['event']): void {
    logger.warn(
      { ...identify(event.notification), reason: event.reason, fields: event.mismatches },
      event.message,
    );
    emit('rejected', event);
  }

  function giveUp(n: IpnNotification, verdict: Extract<Verdict, { kind: 'later' }>, attempts: number): void {
    if (verdict.pending) {
      const message = `the service still reports ${verdict.pending.state} for ${n.transaction_id} after ${attempts} attempts`;
      reject({
        reason: 'not_final',
        message,
        mismatches: ['state'],
        notification: n,
        status: verdict.pending,
      });
    } else report(new VerificationError(n.transaction_id, attempts, verdict.reason), n);
  }

  // ---- at-least-once: stored before the 200, awaited, retried, dead at last ----

  async function deliverDurable(
    inbox: DurableStore,
    key: string,
    n: IpnNotification,
    leaseId: string,
    attempts: number,
  ): Promise<boolean> {
    let result: Attempt;
    try {
      result = await within(attemptDurable(n), Math.floor(leaseMs * 0.9), key);
    } catch (error) {
      result = {
        kind: 'failed',
        error: error instanceof IpnKitError ? error : new DeliveryError(messageOf(error), { cause: error }),
      };
    }
    try {
      if (result.kind === 'delivered') {
        await inbox.settle(key, leaseId, { status: 'delivered' });
        return true;
      }
      if (result.kind === 'rejected') {
        reject(result.event);
        await inbox.release(key);
        return false;
      }
      const failure =
        result.kind === 'failed'
          ? result.error
          : new VerificationError(n.transaction_id, attempts, result.reason);
      if (result.kind === 'failed') report(failure, n);
      if (attempts >= options.maxAttempts) {
        await inbox.settle(key, leaseId, { status: 'dead', error: failure.message });
        logger.error(
          { ...identify(n), attempts },
          `IPN notification ${key} is dead after ${attempts} attempts`,
        );
        emit('dead', { key, notification: toEvent(n), attempts, lastError: failure.message });
        return false;
      }
      const delay = Math.min(options.retryDelayMs * 2 ** (attempts - 1), MAX_RETRY_DELAY);
      await inbox.settle(key, leaseId, {
        status: 'failed',
        error: failure.message,
        nextAttemptAt: new Date(Date.now() + delay),
      });
      after(delay, recover);
    } catch (cause) {
      // The lease runs out and the entry is taken up again: at least once, never lost.
      report(
        new StoreError(`the store failed to record the delivery of ${key}: ${messageOf(cause)}`, { cause }),
        n,
      );
    }
    return false;
  }

  async function attemptDurable(n: IpnNotification): Promise<Attempt> {
    if (verify) {
      const verdict = await verifyNotification(verify, n);
      if (verdict.kind !== 'confirmed') return verdict;
    }
    return emitAndSettle(n);
  }

  /** Takes up due and abandoned entries (a crash, a retry, a replay) and delivers them. */
  function recover(): void {
    if (durable === undefined || recovering || closed) return;
    recovering = true;
    const lease = { id: randomUUID(), ms: leaseMs };
    durable
      .lease(lease, RECOVERY_BATCH)
      .then(async (entries) => {
        await Promise.all(
          entries.map((entry) => {
            const read = ipnNotificationSchema.safeParse(entry.record);
            if (read.success) return deliverDurable(durable, entry.key, read.data, lease.id, entry.attempts);
            const error = `the stored record of ${entry.key} is not a notification`;
            return durable.settle(entry.key, lease.id, { status: 'dead', error });
          }),
        );
        return entries.length;
      })
      .then(
        (taken) => {
          recovering = false;
          if (taken === RECOVERY_BATCH) after(0, recover); // more are waiting
        },
        (cause: unknown) => {
          recovering = false;
          report(
            new StoreError(`the store failed to hand out undelivered notifications: ${messageOf(cause)}`, {
              cause,
            }),
          );
        },
      );
  }

  if (durable) {
    after(0, recover); // after the caller has added its listeners
    const interval = setInterval(recover, options.recoveryIntervalMs);
    interval.unref();
    timers.add(interval);
  }

  function inbox(): DurableStore {
    if (durable) return durable;
    throw new IpnKitError(
      'IPN_NOT_DURABLE',
      "the inbox needs delivery: 'at-least-once' with a durable store, such as new PostgresStore({ pool })",
    );
  }

  return {
    /**
     * Claims (or, at-least-once, stores) a notification before the answer: `true` first, `false` a resend.
     * `leaseId` goes to `dispatch`, after the answer.
     */
    async accept(n: IpnNotification): Promise<{ claimed: boolean | StoreError; leaseId: string }> {
      const key = keyOf(n);
      const lease = { id: randomUUID(), ms: leaseMs };
      const late = (): void => {
        // Answered 503, but the claim went through after all: ours to deliver, or it would be lost.
        logger.warn(identify(n), 'IPN claim landed after storeTimeout: delivered late');
        dispatch(n, lease.id);
      };
      const claimed = await claimer.claim(key, late, durable && (() => durable.receive(key, n, lease)));
      return { claimed, leaseId: lease.id };
    },

    /** Runs after the answer: verification, then the events. */
    dispatch,

    /** A resend. At-most-once with `verify`, a copy that differs from the one being verified waits its turn. */
    duplicate(n: IpnNotification): void {
      const queue = candidates.get(keyOf(n));
      if (queue && !queue.some((c) => c.amount === n.amount && c.custom_data === n.custom_data))
        queue.push(n);
    },

    async reconcile(transactionId: string): Promise<ReconcileResult> {
      if (verify === undefined) {
        throw new IpnKitError(
          'IPN_NO_STATUS_CLIENT',
          'reconcile needs a status client: ipnRouter({ verify: createStatusClient({ baseUrl, apiKey }) })',
        );
      }
      const record = await verify.getStatus(transactionId);
      if (!isFinal(record.state)) return { record, emitted: false };
      const key = keyOf(record);
      const lease = { id: randomUUID(), ms: leaseMs };
      // The service's own record needs no verification: emitted directly, through the same dedupe.
      const claimed = await claimer.claim(
        key,
        () => void settleReconciled(record, key, lease.id),
        durable && (() => durable.receive(key, record, lease)),
      );
      if (claimed instanceof StoreError) throw claimed;
      if (!claimed) return { record, emitted: false };
      return { record, emitted: await settleReconciled(record, key, lease.id) };
    },

    inbox: {
      list: async (listOptions) => inbox().list(listOptions),
      get: async (key) => inbox().get(key),
      replay: async (key) => {
        const found = await inbox().replay(key);
        if (found) after(0, recover);
        return found;
      },
      replayDead: async () => {
        const count = await inbox().replayDead();
        if (count > 0) after(0, recover);
        return count;
      },
      purge: async (before) => inbox().purge(before),
    } satisfies Inbox,

    close(): void {
      closed = true;
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
    },
  };

  function dispatch(n: IpnNotification, leaseId: string): void {
    if (durable) void deliverDurable(durable, keyOf(n), n, leaseId, 1);
    else if (verify) {
      candidates.set(keyOf(n), [n]);
      void verifyNext(keyOf(n), 1);
    } else emitNow(n);
  }

  async function settleReconciled(record: IpnNotification, key: string, leaseId: string): Promise<boolean> {
    if (durable) return deliverDurable(durable, key, record, leaseId, 1);
    emitNow(record);
    return true;
  }
}

/** Rejects with a `DeliveryError` when `pending` has not settled within `ms`. */
function within<T>(pending: Promise<T>, ms: number, key: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new DeliveryError(`the listeners of ${key} did not settle within ${ms} ms (leaseMs)`)),
      ms,
    );
    pending.then(resolve, reject).finally(() => clearTimeout(timer));
  });
}

function identify(n: IpnNotification): { transaction_id: string; state: string } {
  return { transaction_id: n.transaction_id, state: n.state };
}
