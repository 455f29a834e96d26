import type { DeliveryContext } from './delivery-context.js';
import { keyOf } from './delivery-context.js';
import { VerificationError } from './errors.js';
import type { IpnNotification } from './schema.js';
import { verifyNotification, type StatusSource, type Verdict } from './verify-notification.js';

const MAX_VERIFY_DELAY = 10 * 60_000;

/**
 * At-most-once with `verify`: each accepted notification is emitted once the service confirms it, retried
 * within `verifyAttempts` when the service cannot answer now. A copy of the same key that differs from the
 * one being verified (a genuine one behind a forgery) waits its turn.
 */
export function createVerifyQueue<C>(context: DeliveryContext<C>, source: StatusSource) {
  const { options, after, detach, reject, release, report, emitNow } = context;
  /** Notifications of one key awaiting verification, the one being verified first. */
  const candidates = new Map<string, IpnNotification[]>();

  async function verifyNext(key: string, attempt: number): Promise<void> {
    const head = candidates.get(key)?.[0];
    if (head === undefined) return;
    const verdict = await verifyNotification(source, head);
    if (context.isClosed()) return;
    if (verdict.kind === 'confirmed') {
      candidates.delete(key);
      emitNow(head);
    } else if (verdict.kind === 'rejected') {
      reject(verdict.event);
      candidates.get(key)?.shift();
      if (candidates.get(key)?.length) detach(verifyNext(key, 1));
      else {
        candidates.delete(key);
        release(key); // a genuine notification of this key can still come
      }
    } else if (attempt < options.verifyAttempts) {
      const backoff = Math.min(options.verifyRetryDelayMs * 2 ** (attempt - 1), MAX_VERIFY_DELAY);
      after(Math.max(backoff, verdict.retryAfterMs), () => detach(verifyNext(key, attempt + 1)));
    } else {
      candidates.delete(key);
      release(key); // so that a resend or ipn.reconcile() can still deliver it
      giveUp(head, verdict, attempt);
    }
  }

  function giveUp(n: IpnNotification, verdict: Extract<Verdict, { kind: 'later' }>, attempts: number): void {
    if (verdict.pending === undefined) {
      report(new VerificationError(n.transaction_id, attempts, verdict.reason), n);
      return;
    }
    const message = `the service still reports ${verdict.pending.state} for ${n.transaction_id} after ${attempts} attempts`;
    reject({ reason: 'not_final', message, mismatches: ['state'], notification: n, status: verdict.pending });
  }

  return {
    /** Verifies a notification just accepted, then emits it (or `rejected`, or `error`). */
    start(n: IpnNotification): void {
      candidates.set(keyOf(n), [n]);
      detach(verifyNext(keyOf(n), 1));
    },
    /** A resend: queued when it differs from the copy being verified, so a forgery cannot hide it. */
    duplicate(n: IpnNotification): void {
      const queue = candidates.get(keyOf(n));
      if (queue && !queue.some((c) => c.amount === n.amount && c.custom_data === n.custom_data))
        queue.push(n);
    },
  };
}
