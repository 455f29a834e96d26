import type { FinalState } from '../notification/schema.js';

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
