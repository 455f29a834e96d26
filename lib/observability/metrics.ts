import type { IpnKitError } from '../shared/errors.js';

/**
 * What a router has counted since it was created: read it with `ipn.metrics()`, export it as you like.
 * @inline
 */
export interface IpnMetrics {
  /** Valid notifications received: first deliveries and resends. */
  received: number;
  /** Resends dropped. */
  duplicates: number;
  /** Requests rejected (400, 401, 413, 415). */
  invalid: number;
  /** Notifications emitted (the `notification` event), by state; at-least-once, the ones delivered. */
  emitted: { SUCCESSFUL: number; FAILED: number; other: number };
  /** Notifications the status query or an expectation contradicted. */
  rejected: number;
  /**
   * First deliveries in a state that is neither final nor a known spelling of one (such as `PENDING`, or a
   * state the service started sending): they reach only `notification`, with a warning in the log.
   */
  unknownStates: number;
  /** Expected transactions the sweep could not reconcile within its bound: the `stale` event. */
  stale: number;
  /** `FAILED` notifications after their transaction's accepted `SUCCESSFUL`: the `conflict` event. */
  conflicts: number;
  /** Listeners that threw or rejected. */
  listenerErrors: number;
  /** Store failures (answered 503, or a delivery that could not be recorded). */
  storeErrors: number;
  /** Notifications that could not be verified in time. */
  verificationErrors: number;
  /** With `verify`: notifications answered 503 because `maxPendingVerifications` were being verified. */
  verificationsShed: number;
  /** At-least-once: delivery attempts started, and notifications marked dead. */
  deliveryAttempts: number;
  dead: number;
  /** With a `verify` client that counts (`createStatusClient()` does): its requests, refusals and savings. */
  statusQueries:
    | {
        made: number;
        refused: number;
        cached: number;
        shared: number;
        /** Requests the client may still send in the current minute, when it says (`createStatusClient()` does). */
        budgetLeft?: number;
      }
    | undefined;
  /**
   * At-least-once: the age in ms of the oldest notification not delivered yet (`received` or `failed`; 0
   * when there is none), as of the last inbox read. The read is made at each recovery pass only while an
   * `alert` listener is added or `registerIpnMetrics` exports it; absent before the first read.
   */
  backlogAgeMs?: number;
}

type Counted = Omit<IpnMetrics, 'emitted' | 'statusQueries'>;

/** The router's counters, fed by its events. */
export function createMetrics(
  statusStats?: () => unknown,
  backlogAgeMs: () => number | undefined = () => undefined,
) {
  const counts: Counted = {
    received: 0,
    duplicates: 0,
    invalid: 0,
    rejected: 0,
    unknownStates: 0,
    stale: 0,
    conflicts: 0,
    listenerErrors: 0,
    storeErrors: 0,
    verificationErrors: 0,
    verificationsShed: 0,
    deliveryAttempts: 0,
    dead: 0,
  };
  const emitted = { SUCCESSFUL: 0, FAILED: 0, other: 0 };
  const countEmitted = (state: string): void => {
    if (state === 'SUCCESSFUL' || state === 'FAILED') emitted[state] += 1;
    else emitted.other += 1;
  };
  const ERROR_COUNTERS: Record<string, keyof Counted> = {
    IPN_LISTENER_FAILED: 'listenerErrors',
    IPN_STORE_FAILED: 'storeErrors',
    IPN_VERIFY_UNAVAILABLE: 'verificationErrors',
    IPN_VERIFY_BUSY: 'verificationsShed',
  };

  return {
    /** Counts one emitted event. */
    count: (event: string, payload: unknown, awaited = false): void => {
      if (event === 'duplicate') counts.duplicates += 1;
      else if (event === 'invalid') counts.invalid += 1;
      else if (event === 'rejected') counts.rejected += 1;
      else if (event === 'dead') counts.dead += 1;
      else if (event === 'stale') counts.stale += 1;
      else if (event === 'conflict') counts.conflicts += 1;
      // An at-least-once attempt is counted once it is delivered (see `delivered`), not at each try.
      else if (event === 'notification' && !awaited) countEmitted((payload as { state: string }).state);
      else if (event === 'error') {
        const { error } = payload as { error: IpnKitError };
        // An at-least-once attempt a listener failed is one error, a DeliveryError caused by the listener's.
        const cause = error.cause as Partial<IpnKitError> | undefined;
        const code = error.code === 'IPN_DELIVERY_FAILED' && cause?.code ? cause.code : error.code;
        const counter = ERROR_COUNTERS[code];
        if (counter) counts[counter] += 1;
      }
    },
    received: (): void => {
      counts.received += 1;
    },
    /** A first delivery in a state that is neither final nor a known spelling of one. */
    unknownState: (): void => {
      counts.unknownStates += 1;
    },
    attempt: (): void => {
      counts.deliveryAttempts += 1;
    },
    /** At-least-once: a notification delivered (every listener succeeded). */
    delivered: (state: string): void => countEmitted(state),
    /** A copy of every figure, now. */
    snapshot: (): IpnMetrics => {
      const stats = statusStats?.() as
        Partial<Record<'queries' | 'refused' | 'cached' | 'shared' | 'budgetLeft', number>> | undefined;
      const statusQueries =
        typeof stats?.queries === 'number'
          ? {
              made: stats.queries,
              refused: stats.refused ?? 0,
              cached: stats.cached ?? 0,
              shared: stats.shared ?? 0,
              ...(typeof stats.budgetLeft === 'number' ? { budgetLeft: stats.budgetLeft } : {}),
            }
          : undefined;
      const age = backlogAgeMs();
      return {
        ...counts,
        emitted: { ...emitted },
        statusQueries,
        ...(age === undefined ? {} : { backlogAgeMs: age }),
      };
    },
  };
}

/** What {@link createMetrics} returns. */
export type Metrics = ReturnType<typeof createMetrics>;
