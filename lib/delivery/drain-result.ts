/**
 * What one attempt came to, as `ipn.drain()` counts it: `other` changed nothing it counts (a forgery
 * released, a lease lost, a store failure reported as an `error` event).
 */
export type Outcome = 'delivered' | 'retried' | 'dead' | 'other';

/**
 * What one `ipn.drain()` pass did: numbers only, so that a cron handler can log or return them as they are.
 * @inline
 */
export interface DrainResult {
  /**
   * Notifications whose events this pass emitted and whose listeners all settled: inbox entries marked
   * delivered (at-least-once), and notifications confirmed by a verification retry (at-most-once with
   * `verify`). Not the expectations the sweep delivered: those are in `swept`.
   */
  delivered: number;
  /**
   * Attempts of this pass that failed and were given a later attempt: an inbox entry now `failed` with its
   * next attempt time (at-least-once: `retryDelayMs`, doubled each time), or a verification that could not
   * be made yet, scheduled again (at-most-once, `verifyRetryDelayMs`).
   */
  retried: number;
  /**
   * Notifications given up on in this pass: inbox entries marked dead after `maxAttempts` (a `dead` event
   * each), and verifications given up after `verifyAttempts` (an `error` or `rejected` event each).
   */
  dead: number;
  /**
   * Expectations ({@link IpnRouter.expect}) the sweep pass brought to an end: delivered from the service's
   * record, rejected, or reported `stale`. 0 when another instance held the sweep's lock.
   */
  swept: number;
  /**
   * A lower bound of the due work this pass did not reach: 0 when it saw the end of what was due. Otherwise
   * 1 when the budget ran out after a full inbox batch (50) or a full sweep batch (20), or when the store
   * failed to hand out due entries: more may be waiting, call `drain()` again. Also 1 while `ipn.pause()`
   * holds delivery (nothing was taken up): a loop that calls again while `left` is above 0 must stop then.
   */
  left: number;
}

/** The inbox's part of a drain (at-least-once). */
export type InboxDrain = Omit<DrainResult, 'swept'>;

/** The drain options. @inline */
export interface DrainOptions {
  /**
   * How long the pass may take up new work, in milliseconds (default 10_000): no new inbox batch or sweep
   * batch starts after it. Work started is finished, each attempt bounded by `leaseMs` and each store call
   * by `storeTimeoutMs`, so the pass can take up to about `budgetMs + leaseMs`: give the platform's limit
   * that margin.
   */
  budgetMs?: number;
}

/** `budgetMs` when none is given. */
export const DEFAULT_DRAIN_BUDGET_MS = 10_000;
