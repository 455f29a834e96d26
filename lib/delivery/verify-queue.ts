import type { DeliveryContext } from './delivery-context.js';
import { keyOf } from './delivery-context.js';
import { VerificationError } from '../pipeline/errors.js';
import type { IpnNotification } from '../pipeline/schema.js';
import {
  genuineRecord,
  verifyNotification,
  type StatusSource,
  type Verdict,
} from '../status/verify-notification.js';

const MAX_VERIFY_DELAY = 10 * 60_000;

/**
 * At-most-once with `verify`: each accepted notification is emitted once the service confirms it, retried
 * within `verifyAttempts` when the service cannot answer now.
 *
 * A copy that the service contradicts in amount or `custom_data` only, for a transaction that did end in that
 * state, is a forgery of a real payment that claimed the key first: the genuine copy was (or will be) a
 * duplicate of that key. So the service's own record is delivered in its place, and the payment is not lost.
 */
export function createVerifyQueue<C>(context: DeliveryContext<C>, source: StatusSource) {
  const { options, after, detach, reject, release, report, emitNow, logger } = context;
  /** Keys being verified, with the notification that claimed each. */
  const pending = new Map<string, IpnNotification>();

  async function verify(n: IpnNotification, attempt: number): Promise<void> {
    const key = keyOf(n);
    const verdict = await verifyNotification(source, n);
    if (context.isClosed() || pending.get(key) !== n) return;
    if (verdict.kind === 'confirmed') {
      pending.delete(key);
      await emitNow(n);
    } else if (verdict.kind === 'rejected') {
      pending.delete(key);
      reject(verdict.event);
      const genuine = genuineRecord(verdict.event);
      if (genuine === undefined)
        release(key); // no genuine notification of this key can exist
      else {
        logger.warn(
          { transaction_id: n.transaction_id, state: n.state },
          'delivered the service record instead',
        );
        await emitNow(genuine);
      }
    } else if (attempt < options.verifyAttempts) {
      const backoff = Math.min(options.verifyRetryDelayMs * 2 ** (attempt - 1), MAX_VERIFY_DELAY);
      after(Math.max(backoff, verdict.retryAfterMs), () => detach(verify(n, attempt + 1)));
    } else {
      pending.delete(key);
      release(key); // so that a resend or ipn.reconcile() can still deliver it
      giveUp(n, verdict, attempt);
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
    /**
     * Verifies a notification just accepted, then emits it (or `rejected`, or `error`). Resolves when the
     * first attempt and its listeners have settled (a retry is scheduled for later); never rejects.
     */
    start(n: IpnNotification): Promise<void> {
      pending.set(keyOf(n), n);
      return detach(verify(n, 1));
    },
    /**
     * On shutdown: every notification still awaiting verification is reported (`error` with it) and its key
     * released, so that the service's resend or a reconcile after the restart delivers it.
     */
    close(): void {
      for (const [key, n] of pending) {
        release(key);
        report(
          new VerificationError(n.transaction_id, 0, 'the router was closed before it could verify it'),
          n,
        );
      }
      pending.clear();
    },
  };
}
