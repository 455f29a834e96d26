import {
  messageOf,
  StatusQueryError,
  StatusRateLimitError,
  StoreError,
  TransactionNotFoundError,
} from '../shared/errors.js';
import { within } from '../shared/within.js';
import { createSlidingWindow } from '../shared/sliding-window.js';
import { createFailureWindow } from './failure-window.js';
import type { AlertEvent, AlertKind, AlertOptions } from './alert-event.js';
import type { Logger } from './logger.js';

/** What the monitor reads of the inbox: the oldest entry of a status (a durable store's `list`). */
export interface InboxReader {
  list(options: {
    status: 'received' | 'failed' | 'dead';
    limit: number;
    order: 'oldest';
  }): Promise<ReadonlyArray<{ receivedAt: Date; key: string }>>;
}

/** What {@link createAlertMonitor} needs. */
export interface AlertMonitorOptions {
  thresholds: AlertOptions;
  /** Emits the `alert` event. */
  emit: (event: AlertEvent) => void;
  /** Whether anything listens to `alert`: when not, every hook returns at once, doing nothing. */
  listening: () => boolean;
  logger: Logger;
  /** Bounds each inbox read. */
  storeTimeoutMs: number;
  /** The clock, in ms since the epoch. @default Date.now */
  now?: () => number;
}

/** One condition's state while it fires. */
interface Firing {
  since: number;
  count: number;
  /** The last occurrence: a quiet kind resolves `quietMs` after it. */
  lastAt: number;
  threshold: number;
  value?: number;
  lastError?: string;
  key?: string;
  /** A quiet kind's timer is scheduled. */
  timer?: NodeJS.Timeout;
}

/** What a condition that fires or counts one more occurrence reports. */
type Occurrence = Omit<Firing, 'since' | 'lastAt' | 'timer' | 'count'> & { count?: number; message: string };

/**
 * Turns what the router sees (attempts, events, status answers, inbox reads) into `alert` events: one when a
 * condition starts, one when it ends. With no `alert` listener every hook returns at once: no clock read, no
 * count, no timer, no inbox read (the request path costs what it did without alerts).
 */
export function createAlertMonitor(options: AlertMonitorOptions) {
  const { thresholds: t, emit, listening, logger, storeTimeoutMs, now = Date.now } = options;
  const firing = new Map<AlertKind, Firing>();
  let inARow = 0;
  let ratio = createFailureWindow(t.failureWindowMs);
  /** `deliveries_failing` fired on failures in a row (not on the ratio alone): the next success ends it. */
  let failingInARow = false;
  const forged = createSlidingWindow(t.forgedWindowMs);
  let closed = false;
  /** The backlog's age at the last inbox read (ms), for the metric; `undefined` until one ran. */
  let backlogAgeMs: number | undefined;
  /** When the last `dead` event was seen: an inbox read begun before it must not resolve `dead`. */
  let deadSeenAt = -Infinity;
  let reading: Promise<void> | undefined;
  /** Inbox reads in a row that found the backlog younger than its threshold while it fired. */
  let youngReads = 0;
  /** Something other than an `alert` listener wants the inbox read (the backlog metric). */
  let watched = false;

  const tell = (kind: AlertKind, state: 'firing' | 'resolved', f: Firing, message: string, at: number) => {
    const event: AlertEvent = {
      kind,
      state,
      message,
      since: new Date(f.since),
      at: new Date(at),
      count: f.count,
      threshold: f.threshold,
      ...(f.value === undefined ? {} : { value: f.value }),
      ...(f.lastError === undefined ? {} : { lastError: f.lastError }),
      ...(f.key === undefined ? {} : { key: f.key }),
    };
    emit(event);
  };

  /** Fires `kind` (told once), or counts one more occurrence of it while it fires. */
  function fire(kind: AlertKind, at: number, o: Occurrence, quiet = false): void {
    const { message, count = 1, ...fields } = o;
    const current = firing.get(kind);
    if (current) {
      Object.assign(current, fields, { lastAt: at, count: current.count + count });
      return;
    }
    const f: Firing = { ...fields, since: at, lastAt: at, count };
    firing.set(kind, f);
    if (quiet) scheduleQuiet(kind, f, t.quietMs);
    tell(kind, 'firing', f, message, at);
  }

  function resolve(kind: AlertKind, at: number, message: (f: Firing) => string): void {
    const f = firing.get(kind);
    if (!f) return;
    firing.delete(kind);
    if (f.timer) clearTimeout(f.timer);
    tell(kind, 'resolved', f, message(f), at);
  }

  /** A quiet kind resolves once `quietMs` passed since its last occurrence. */
  function scheduleQuiet(kind: AlertKind, f: Firing, ms: number): void {
    if (closed) return;
    f.timer = setTimeout(() => {
      f.timer = undefined;
      const at = now();
      const left = f.lastAt + t.quietMs - at;
      if (left > 0) return scheduleQuiet(kind, f, left);
      resolve(kind, at, (g) => `no ${QUIET_WORDS[kind]} for ${seconds(t.quietMs)} (${g.count} in all)`);
    }, ms);
    f.timer.unref();
  }

  function failingNow(at: number): { failing: boolean; value: number; threshold: number; why: string } {
    const { attempts, failures } = ratio.totals(at);
    if (inARow >= t.failuresInARow) {
      return {
        failing: true,
        value: inARow,
        threshold: t.failuresInARow,
        why: `${inARow} delivery attempts failed in a row`,
      };
    }
    const share = attempts === 0 ? 0 : failures / attempts;
    const failing = attempts >= t.failureRatioMinAttempts && share >= t.failureRatio;
    const why = `${failures} of ${attempts} delivery attempts failed in the last ${seconds(t.failureWindowMs)}`;
    return { failing, value: share, threshold: t.failureRatio, why };
  }

  function ratioRecovered(at: number): boolean {
    const { attempts, failures } = ratio.totals(at);
    return attempts === 0 || failures / attempts < t.failureRatio / 2;
  }

  return {
    /** An at-least-once attempt ended: delivered, or failed (`error`: its message). */
    attempt(delivered: boolean, key: string, error?: string): void {
      if (!listening()) return;
      const at = now();
      ratio.add(at, !delivered);
      if (delivered) {
        inARow = 0;
        if (!firing.has('deliveries_failing')) return;
        // Failures in a row end at the next success, and the ratio is judged afresh from there (the failures
        // that made the alert would otherwise fire it again at the next one). Fired on the ratio alone, it
        // ends once a success finds the ratio under half its threshold: a share hovering at the threshold
        // must not fire and resolve at every other attempt.
        if (!failingInARow && !ratioRecovered(at)) return;
        if (failingInARow) ratio = createFailureWindow(t.failureWindowMs);
        failingInARow = false;
        resolve(
          'deliveries_failing',
          at,
          (f) => `deliveries succeed again, after ${f.count} failed attempts`,
        );
        return;
      }
      inARow += 1;
      const state = failingNow(at);
      if (!state.failing && !firing.has('deliveries_failing')) return;
      if (inARow >= t.failuresInARow) failingInARow = true;
      const { value, threshold, why } = state;
      fire('deliveries_failing', at, {
        message: why,
        value,
        threshold,
        key,
        ...(error === undefined ? {} : { lastError: error }),
        // At the start, the failures that made it; then one each.
        count: firing.has('deliveries_failing') ? 1 : Math.max(inARow, 1),
      });
    },

    /** Every event the router emits: the ones alerts are made of. */
    observe(event: string, payload: unknown): void {
      if (!ALERTING_EVENTS.has(event) || !listening()) return;
      const at = now();
      const p = payload as Record<string, unknown>;
      if (event === 'dead') {
        deadSeenAt = at;
        const key = String(p.key);
        const lastError = String(p.lastError);
        fire('dead', at, {
          message: `${key} is dead after ${String(p.attempts)} attempts`,
          threshold: 1,
          key,
          lastError,
        });
      } else if (event === 'stale') {
        const key = String(p.transactionId);
        fire(
          'stale',
          at,
          { message: `the sweep gave up on ${key}: ${String(p.reason)}`, threshold: 1, key },
          true,
        );
      } else if (event === 'conflict') {
        const n = p.notification as Record<string, unknown> | undefined;
        const key = `${String(n?.transaction_id)}:${String(n?.state)}`;
        const message = `${key} contradicts the ${String(p.accepted)} already accepted for its transaction`;
        fire('conflict', at, { message, threshold: 1, key }, true);
      } else if (event === 'rejected' || (event === 'invalid' && p.reason === 'unauthorized')) {
        const f = firing.get('forged');
        if (f) return void Object.assign(f, { lastAt: at, count: f.count + 1 });
        forged.add(at);
        const count = forged.count(at);
        if (count < t.forgedBurst) return;
        const message = `${count} notifications answered 401 or rejected as forged in ${seconds(t.forgedWindowMs)}`;
        fire('forged', at, { message, threshold: t.forgedBurst, count }, true);
      }
    },

    /** A status query of the router's client ended: answered, or failed with `error`. */
    status(error?: unknown): void {
      if (!listening()) return;
      const at = now();
      // A not-found is an answer too: the service took the query.
      if (error === undefined || error instanceof TransactionNotFoundError) {
        resolve('status_refused', at, (f) => `the status query is answered again, after ${f.count} refused`);
        return;
      }
      const refused =
        (error instanceof StatusQueryError && error.blocked) ||
        (error instanceof StatusRateLimitError && error.reason === 'blocked');
      if (!refused) return;
      const message = `the payment service refused or blocked a status query: ${messageOf(error)}`;
      fire('status_refused', at, { message, threshold: 1, lastError: messageOf(error) });
    },

    /**
     * The recovery pass's read of the inbox (at-least-once): the backlog's age and whether dead entries
     * remain. Only when something listens (or the metric is watched); one at a time; never rejects.
     */
    checkInbox(inbox: InboxReader): Promise<void> {
      if (closed || reading || !(watched || listening())) return reading ?? Promise.resolve();
      reading = readInbox(inbox).finally(() => {
        reading = undefined;
      });
      return reading;
    },

    /** Whether anything listens to `alert`: a caller skips even wrapping its work when not. */
    active: (): boolean => listening(),
    /** The backlog's age at the last inbox read, in ms; `undefined` before one. */
    backlogAgeMs: (): number | undefined => backlogAgeMs,
    /** The backlog metric is exported: read the inbox at each recovery pass even with no listener. */
    watch(): void {
      watched = true;
    },
    close(): void {
      closed = true;
      for (const f of firing.values()) if (f.timer) clearTimeout(f.timer);
    },
  };

  async function readInbox(inbox: InboxReader): Promise<void> {
    const started = now();
    const oldest = (status: 'received' | 'failed' | 'dead') =>
      within(inbox.list({ status, limit: 1, order: 'oldest' }), storeTimeoutMs, () => {
        return new StoreError(`the inbox read did not answer within ${storeTimeoutMs} ms (storeTimeoutMs)`);
      }).then((entries) => entries[0]);
    let found;
    try {
      found = await Promise.all([oldest('received'), oldest('failed'), oldest('dead')]);
    } catch (cause) {
      // The recovery pass reports the store's failures; this read only waits for the next one.
      logger.debug({}, `the alerts' inbox read failed: ${messageOf(cause)}`);
      return;
    }
    const [received, failed, dead] = found;
    const at = now();
    const times = [received, failed].flatMap((e) => (e ? [e.receivedAt.getTime()] : []));
    const age = times.length === 0 ? 0 : Math.max(0, at - Math.min(...times));
    backlogAgeMs = age;
    if (!listening()) return;
    if (age > t.backlogAgeMs) {
      const key =
        received && failed
          ? (received.receivedAt <= failed.receivedAt ? received : failed).key
          : (received ?? failed)?.key;
      const message = `the oldest notification not delivered was received ${seconds(age)} ago`;
      const current = firing.get('backlog');
      if (current) Object.assign(current, { value: age, key });
      else fire('backlog', at, { message, value: age, threshold: t.backlogAgeMs, ...(key ? { key } : {}) });
      youngReads = 0;
    } else if (firing.has('backlog') && (youngReads += 1) >= 2) {
      // Two reads in a row: the two lists are read at once, and an entry that changes status between them
      // (failed to received, by a replay) is in neither: one read alone must not resolve it.
      youngReads = 0;
      resolve('backlog', at, () => `the backlog is delivered: its oldest entry is ${seconds(age)} old`);
    }
    if (dead) {
      if (!firing.has('dead')) {
        fire('dead', at, {
          message: `the inbox holds dead entries, such as ${dead.key}`,
          threshold: 1,
          key: dead.key,
          count: 0,
        });
      }
    } else if (started > deadSeenAt) {
      resolve('dead', at, (f) => `the inbox holds no dead entry any more (${f.count} died meanwhile)`);
    }
  }
}

/** What {@link createAlertMonitor} returns. */
export type AlertMonitor = ReturnType<typeof createAlertMonitor>;

const ALERTING_EVENTS: ReadonlySet<string> = new Set(['dead', 'stale', 'conflict', 'rejected', 'invalid']);

const QUIET_WORDS: Record<AlertKind, string> = {
  deliveries_failing: 'failed attempt',
  dead: 'dead entry',
  backlog: 'backlog',
  stale: 'stale expectation',
  forged: 'forged notification',
  status_refused: 'refused status query',
  conflict: 'conflicting notification',
};

function seconds(ms: number): string {
  return ms >= 120_000 ? `${Math.round(ms / 60_000)} min` : `${Math.round(ms / 1000)} s`;
}
