/**
 * What an `alert` is about:
 * - `deliveries_failing`: at-least-once delivery attempts fail (`failuresInARow` in a row, or a
 *   `failureRatio` of the attempts of the last `failureWindowMs`); resolved at the next delivered attempt
 *   that leaves neither true.
 * - `dead`: the inbox holds `dead` entries; fired at the first `dead` event (or an inbox read that finds
 *   one), resolved when an inbox read finds none (replayed or purged).
 * - `backlog`: the oldest entry not delivered yet (`received` or `failed`) is older than `backlogAgeMs`;
 *   measured by the recovery pass's inbox read, resolved when two reads in a row find it younger.
 * - `stale`: the sweep gave up on an expected transaction (`stale` event); resolved after `quietMs` without
 *   another.
 * - `forged`: a burst of notifications that look forged: `forgedBurst` answered 401 (a wrong IPN address
 *   token, a failed signature) or `rejected` (contradicted by the service's record or the expectation)
 *   within `forgedWindowMs`; resolved after `quietMs` without another.
 * - `status_refused`: the payment service refused or blocked a status query (an answer 429 or 403, or its
 *   cool-down running); resolved at the next status query answered.
 * - `conflict`: a notification contradicted the state already accepted for its transaction (`conflict`
 *   event); resolved after `quietMs` without another.
 * @inline
 */
export type AlertKind =
  'deliveries_failing' | 'dead' | 'backlog' | 'stale' | 'forged' | 'status_refused' | 'conflict';

/** Every alert kind, in the order of {@link AlertKind}. */
export const ALERT_KINDS: readonly AlertKind[] = Object.freeze([
  'deliveries_failing',
  'dead',
  'backlog',
  'stale',
  'forged',
  'status_refused',
  'conflict',
]);

/**
 * Payload of the `alert` event: a condition that started (`firing`) or ended (`resolved`). Each condition
 * is told once when it starts and once when it ends, never once per notification. It names no customer:
 * at most a transaction's inbox key and an error message redacted as the logs are.
 */
export interface AlertEvent {
  /** What the condition is (see the kinds). */
  kind: AlertKind;
  /** `firing` when the condition starts, `resolved` when it ends. */
  state: 'firing' | 'resolved';
  /** What happened, in words, with the figures. */
  message: string;
  /** When the condition started (the same in its `firing` and its `resolved` event). */
  since: Date;
  /** When this event was told. */
  at: Date;
  /**
   * How many occurrences the condition counted from its start to this event: failed attempts, `dead`
   * events, forged notifications, stale expectations, refused status queries, conflicts; for `backlog`, 1.
   */
  count: number;
  /** The threshold crossed, in the unit of `value` (attempts, a ratio, ms, notifications). */
  threshold: number;
  /**
   * The figure measured: the failures in a row or the failure ratio (`deliveries_failing`), the backlog's
   * age in ms (`backlog`); absent for the other kinds.
   */
  value?: number;
  /** The last failure's message (`deliveries_failing`, `dead`, `status_refused`), redacted as logs are. */
  lastError?: string;
  /** The inbox key (`transaction_id:state`) or the transaction of the last occurrence, when there is one. */
  key?: string;
}

/**
 * The thresholds of the `alert` event (the router's `alerts` option). Every field is optional; each
 * default is given below, chosen so that an incident is told within seconds.
 * @inline
 */
export interface AlertOptions {
  /** `deliveries_failing` fires once this many delivery attempts failed in a row. @default 10 */
  failuresInARow: number;
  /**
   * `deliveries_failing` also fires when at least this share (0 to 1) of the attempts of the last
   * `failureWindowMs` failed, once there were `failureRatioMinAttempts` of them. @default 0.5
   */
  failureRatio: number;
  /** Attempts in the window before `failureRatio` is judged. @default 20 */
  failureRatioMinAttempts: number;
  /** The window of `failureRatio`, in ms. @default 300_000 (5 minutes) */
  failureWindowMs: number;
  /**
   * `backlog` fires when the oldest entry not delivered is older than this, in ms (read at each recovery
   * pass, every `recoveryIntervalMs`, and at each `drain()`). @default 300_000 (5 minutes)
   */
  backlogAgeMs: number;
  /** `forged` fires once this many notifications were answered 401 or `rejected` within `forgedWindowMs`. @default 5 */
  forgedBurst: number;
  /** The window of `forgedBurst`, in ms. @default 60_000 */
  forgedWindowMs: number;
  /** `stale`, `forged` and `conflict` resolve after this long without another occurrence, in ms. @default 300_000 (5 minutes) */
  quietMs: number;
}
