import type { FinalState } from '../notification/schema.js';
import { StoreError } from '../shared/errors.js';
import { createBatcher } from './batcher.js';

/**
 * What a transaction's lifecycle makes of one of its final notifications: `accepted` (deliver it as its
 * state says), or `conflict` (a `FAILED` after the transaction's `SUCCESSFUL` was accepted: never `failed`).
 * @inline
 */
export type LifecycleVerdict = 'accepted' | 'conflict';

/**
 * Where a store keeps each transaction's lifecycle: the final state already accepted for a `transaction_id`,
 * so that a `FAILED` after a `SUCCESSFUL` is never delivered as a failure, on any instance. The built-in
 * stores have one (`store.lifecycle`); a custom store may add one. Every method may answer a value or a
 * promise.
 *
 * `decide` must be atomic per transaction across every instance sharing the store: when a `FAILED` and a
 * `SUCCESSFUL` of one transaction are decided at once, either the `FAILED` is decided first (`accepted`,
 * then the `SUCCESSFUL`, `accepted`), or the `SUCCESSFUL` is (`accepted`, then the `FAILED`, `conflict`).
 * A read then a write is not atomic: use one statement that locks the transaction's row (`INSERT ... ON
 * CONFLICT DO UPDATE ... RETURNING`), or one script (Redis's `EVAL`).
 */
export interface LifecycleStore {
  /**
   * Records that a notification of `transactionId` in `state` is accepted, and says what it comes to, in
   * one atomic step: a `SUCCESSFUL` is recorded and answers `accepted`, always (a success stays one); a
   * `FAILED` answers `conflict` when a `SUCCESSFUL` of the transaction was recorded, else it is recorded
   * (unless a `SUCCESSFUL` is) and answers `accepted`. Asked again, it answers from what is recorded then.
   * The record is kept at least `ttlMs` milliseconds (the router's `ttlMs`); a store may keep it longer.
   */
  decide(
    transactionId: string,
    state: FinalState,
    ttlMs: number,
  ): LifecycleVerdict | Promise<LifecycleVerdict>;
}

/** The verdict recorded `state` makes of a notification in `state` asked about: one rule, for every store. */
export function verdictOf(recorded: unknown, asked: FinalState): LifecycleVerdict {
  return asked === 'FAILED' && recorded === 'SUCCESSFUL' ? 'conflict' : 'accepted';
}

/** One lifecycle decision asked of a store: a transaction, the final state it comes in, the router's `ttlMs`. */
export interface Decision {
  transactionId: string;
  state: FinalState;
  ttlMs: number;
}

/**
 * Records a batch of decisions of distinct transactions, each atomic for its transaction, and resolves one
 * recorded state per decision, in order: the state kept before or after it (either is `SUCCESSFUL` for a
 * `FAILED` exactly when a `SUCCESSFUL` was recorded before it), or a {@link StoreError} for a decision the
 * store refused alone (that decision rejects with it, the others of its batch do not).
 */
export type DecideMany = (decisions: Decision[]) => Promise<unknown[]>;

/**
 * The state each decision left, in order, from the rows (`transaction_id`, `state`) its batch's statement
 * wrote and read back, matched by exact transaction id. The statement writes a row for every decision, so
 * a missing one is a failure (a StoreError), never a guess.
 */
export function statesOf(decisions: Decision[], rows: unknown[]): unknown[] {
  const kept = new Map<unknown, unknown>();
  for (const row of rows as Array<{ transaction_id: unknown; state: unknown }>) {
    kept.set(row.transaction_id, row.state);
  }
  return decisions.map(({ transactionId }) => {
    if (!kept.has(transactionId)) {
      throw new StoreError(`the lifecycle statement returned no state for ${transactionId}`);
    }
    return kept.get(transactionId);
  });
}

/**
 * A store's `decide` with group commit: the decisions that arrive while one batch runs go together as the
 * next batch, one statement (or script) and one commit for all of them, as the receives and settlements do
 * ({@link createBatcher}). Every delivery attempt asks for one, so one statement each would cost the
 * database more than the rest of the attempt. Two decisions of one transaction never share a statement:
 * the later one goes in a statement after it, decided on what the earlier one left. When a statement
 * fails, every decision of its batch rejects (the attempts fail and are retried; a decision asked again
 * answers from what is recorded then). `check` throws (a TypeError) for a transaction id the store cannot
 * hold exactly, and `decideMany` may resolve a StoreError for one decision: that decision alone rejects.
 */
export function batchedDecide(
  decideMany: DecideMany,
  stallMs: () => number,
  check: (transactionId: string) => unknown,
): (decision: Decision) => Promise<LifecycleVerdict> {
  const queued = createBatcher(
    async (decisions: Decision[]) => {
      const verdicts: Array<LifecycleVerdict | StoreError> = [];
      let pending = decisions.map((decision, index) => ({ decision, index }));
      while (pending.length > 0) {
        const seen = new Set<string>();
        const now: typeof pending = [];
        const later: typeof pending = [];
        for (const item of pending) {
          const { transactionId } = item.decision;
          (seen.has(transactionId) ? later : now).push(item);
          seen.add(transactionId);
        }
        const recorded = await decideMany(now.map(({ decision }) => decision));
        if (recorded.length !== now.length) {
          throw new StoreError(
            `ipn-kit: a batch of ${now.length} lifecycle decisions resolved ${recorded.length} states`,
          );
        }
        now.forEach(({ decision, index }, at) => {
          const state = recorded[at];
          verdicts[index] = state instanceof StoreError ? state : verdictOf(state, decision.state);
        });
        pending = later;
      }
      return verdicts;
    },
    { stallMs },
  );
  // An id the store cannot hold exactly fails its own decision, before it is queued: sent, it would fail
  // every decision of its batch.
  return async (decision) => {
    check(decision.transactionId);
    const verdict = await queued(decision);
    if (verdict instanceof StoreError) throw verdict;
    return verdict;
  };
}
