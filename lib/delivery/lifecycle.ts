import type { DeliveryContext } from './delivery-context.js';
import { identify, keyOf } from './delivery-context.js';
import { isFinalState, type IpnNotification } from '../notification/schema.js';
import { MemoryLifecycle } from '../stores/memory/memory-lifecycle.js';
import type { LifecycleStore, LifecycleVerdict } from '../stores/lifecycle-store.js';
import type { StatusRecord } from '../status/status-envelope.js';
import type { StatusSource } from '../status/verify-notification.js';
import { within } from '../shared/within.js';
import { messageOf, StoreError } from '../shared/errors.js';
import { monotonicNow } from '../shared/clock.js';

import { accountOfNotification } from './accounts.js';
/** The longest the status query of a conflict is waited for (and at most `verifyTimeoutMs`). */
export const CONFLICT_QUERY_MS = 5_000;

/** Transactions a router without a store lifecycle keeps in its own memory. */
const FALLBACK_ENTRIES = 100_000;

/**
 * A transaction's lifecycle, kept by the store (`store.lifecycle`): decides whether a final notification is
 * delivered as its state says or is a `conflict` (a `FAILED` after an accepted `SUCCESSFUL`), and emits the
 * `conflict` event, with what one status query says now.
 */
export function createLifecycle<C>(context: DeliveryContext<C>, statusSource: StatusSource | undefined) {
  const { options, logger, emit, toEvent } = context;
  const lifecycle: LifecycleStore = options.store.lifecycle ?? fallback();

  function fallback(): LifecycleStore {
    // Money first, but never a refusal that takes a deploy down: the guard holds in this instance.
    logger.warn(
      {},
      "the store has no lifecycle (store.lifecycle): this router keeps each transaction's accepted state in " +
        'its own memory, so a FAILED after a SUCCESSFUL is a conflict only when both reach this instance. ' +
        'With several instances, use a built-in store (MemoryStore, RedisStore, PostgresStore, MysqlStore, ' +
        'SqliteStore) or give your store a lifecycle (see the Store interface)',
    );
    return new MemoryLifecycle(FALLBACK_ENTRIES, Date.now);
  }

  /**
   * What the lifecycle makes of `n`: a store call (atomic per transaction across instances) for a final
   * state; `accepted` at once for any other (it is never a success, nor a failure). May throw or reject: the
   * caller decides what a failure means.
   */
  function decide(n: IpnNotification): LifecycleVerdict | Promise<LifecycleVerdict> {
    if (!isFinalState(n.state)) return 'accepted';
    const verdict = lifecycle.decide(n.transaction_id, n.state, options.ttlMs);
    if (verdict instanceof Promise) return verdict.then(checked);
    return checked(verdict);
  }

  /**
   * {@link decide} as a promise bounded by `storeTimeoutMs`: a store that fails or does not answer rejects
   * with a `StoreError` (never a guess: the caller retries or answers 503). `started`: a decision of `n`
   * already asked for, bounded instead of asking again.
   */
  async function decideWithin(
    n: IpnNotification,
    started?: Promise<LifecycleVerdict>,
  ): Promise<LifecycleVerdict> {
    const key = keyOf(n);
    const failed = (cause: unknown): StoreError =>
      cause instanceof StoreError
        ? cause
        : new StoreError(`the store failed to decide the lifecycle of ${key}: ${messageOf(cause)}`, {
            cause,
          });
    // The message is written only when the time runs out: every delivery attempt asks for a decision.
    const late = () =>
      new StoreError(
        `the store's lifecycle decision of ${key} did not answer within ${options.storeTimeoutMs} ms (storeTimeoutMs)`,
      );
    try {
      const pending = started ?? Promise.resolve().then(() => decide(n));
      return await within(pending, options.storeTimeoutMs, late);
    } catch (cause) {
      throw failed(cause);
    }
  }

  /** What one status query says now, within its bound; `undefined` when there is no client or no answer. */
  async function statusNow(n: IpnNotification): Promise<{ status?: StatusRecord; said: string }> {
    const id = n.transaction_id;
    const account = accountOfNotification(options.accountOf, n, context.logger);
    if (statusSource === undefined) return { said: 'no status client is configured to ask the service' };
    const ms = Math.min(CONFLICT_QUERY_MS, options.verifyTimeoutMs);
    try {
      const query = Promise.resolve().then(() =>
        statusSource.getStatus(id, {
          since: monotonicNow(),
          ...(account === undefined ? {} : { accountGuess: account }),
        }),
      );
      const status = await within(query, ms, () => new Error(`no answer within ${ms} ms`));
      return { status, said: `the status query says ${status.state} now` };
    } catch (error) {
      return { said: `the status query did not answer (${messageOf(error)})` };
    }
  }

  /**
   * Emits `conflict` for `n` (a `FAILED` of a transaction whose `SUCCESSFUL` was accepted), with one status
   * query first, and logs it once as a warning. Resolves once emitted; never rejects.
   */
  async function conflict(n: IpnNotification): Promise<string> {
    const { status, said } = await statusNow(n);
    const message =
      `${keyOf(n)} contradicts the SUCCESSFUL already accepted for this transaction: answered 200 and not ` +
      `emitted as failed (${said}). Look into it: a paid order is never undone by it`;
    logger.warn({ ...identify(n), ...(status && { status: status.state }) }, message);
    emit('conflict', {
      notification: toEvent(n),
      accepted: 'SUCCESSFUL',
      ...(status && { status }),
      message,
    });
    return message;
  }

  return { decide, decideWithin, conflict };
}

/** A lifecycle must answer one of its two verdicts: anything else is its failure, never a guess. */
function checked(verdict: unknown): LifecycleVerdict {
  if (verdict === 'accepted' || verdict === 'conflict') return verdict;
  throw new TypeError(`store.lifecycle.decide must return 'accepted' or 'conflict', got ${String(verdict)}`);
}

/** What {@link createLifecycle} returns. */
export type Lifecycle<C> = ReturnType<typeof createLifecycle<C>>;
