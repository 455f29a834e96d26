import { StatusRateLimitError, TransactionNotFoundError } from '../pipeline/errors.js';
import { isFinalState } from '../pipeline/schema.js';
import type { StatusRecord } from './status-envelope.js';

/** What the guard needs to know; the status client's options supply it. */
export interface QueryGuardOptions {
  maxQueriesPerMinute: number;
  minIntervalMs: number;
  blockCooldownMs: number;
  cacheSize: number;
  now: () => number;
}

/** What the guard saw: every figure counts calls or requests since the client was created. */
export interface StatusClientStats {
  /** Requests sent to the service (retries included). */
  queries: number;
  /** Requests refused locally with `StatusRateLimitError` (a call, or one of its retries): budget spent or cool-down running. */
  refused: number;
  /** Calls answered from the cache (a final state, or a recent non-final or not-found answer). */
  cached: number;
  /** Calls that joined a request already in flight for the same id. */
  shared: number;
  /** Requests that may still be sent in the current 60 s window (0 during a cool-down); fleet-wide with `shared`. */
  readonly budgetLeft: number;
  /** With `shared`: `'shared'` while the shared guard answers, `'fallback'` while it does not. */
  readonly guard?: 'shared' | 'fallback';
  /** With `shared`: calls to the shared guard that failed or timed out. */
  readonly guardFailures?: number;
}

const MINUTE = 60_000;

/**
 * Keeps a status client sparing: one request in flight per id, final answers cached, non-final and
 * not-found answers reused for `minIntervalMs`, at most `maxQueriesPerMinute` requests in any 60 s window,
 * and nothing at all during a cool-down after the service looked like it was blocking.
 */
export function createQueryGuard(options: QueryGuardOptions) {
  const { maxQueriesPerMinute, minIntervalMs, blockCooldownMs, cacheSize, now } = options;
  const inflight = new Map<string, Promise<StatusRecord>>();
  const finals = new Map<string, StatusRecord>();
  const recent = new Map<string, { at: number; answer: StatusRecord | TransactionNotFoundError }>();
  const sent: number[] = []; // send times within the last minute, oldest first
  let blockedUntil = 0;
  const prune = (time: number): void => {
    while (sent.length > 0 && (sent[0] as number) <= time - MINUTE) sent.shift();
  };
  const stats: StatusClientStats = {
    queries: 0,
    refused: 0,
    cached: 0,
    shared: 0,
    get budgetLeft() {
      const time = now();
      prune(time);
      return time < blockedUntil ? 0 : Math.max(0, maxQueriesPerMinute - sent.length);
    },
  };

  const remember = <V>(map: Map<string, V>, id: string, value: V): void => {
    map.delete(id);
    map.set(id, value);
    // Oldest first out: a Map iterates in insertion order.
    if (map.size > cacheSize) map.delete(map.keys().next().value as string);
  };

  function cachedAnswer(id: string): StatusRecord | TransactionNotFoundError | undefined {
    const final = finals.get(id);
    if (final) return final;
    const entry = recent.get(id);
    if (entry && now() - entry.at < minIntervalMs) return entry.answer;
    if (entry) recent.delete(id);
    return undefined;
  }

  return {
    stats,

    /**
     * Answers from the cache, joins a request in flight, or starts `query`, which must call `permit()` before
     * each request it sends.
     */
    ask(id: string, query: () => Promise<StatusRecord>): Promise<StatusRecord> {
      const cached = cachedAnswer(id);
      if (cached !== undefined) {
        stats.cached += 1;
        return cached instanceof TransactionNotFoundError ? Promise.reject(cached) : Promise.resolve(cached);
      }
      const pending = inflight.get(id);
      if (pending) {
        stats.shared += 1;
        return pending;
      }
      const started = query().then(
        (record) => {
          const final = isFinalState(record.state);
          if (final) remember(finals, id, record);
          else remember(recent, id, { at: now(), answer: record });
          return record;
        },
        (error: unknown) => {
          if (error instanceof TransactionNotFoundError) remember(recent, id, { at: now(), answer: error });
          throw error;
        },
      );
      const tracked = started.finally(() => inflight.delete(id));
      inflight.set(id, tracked);
      return tracked;
    },

    /** Takes one request from the budget, or throws `StatusRateLimitError` when none may be sent now. */
    permit(id: string): void {
      const time = now();
      prune(time);
      let refusal: StatusRateLimitError | undefined;
      if (time < blockedUntil) refusal = new StatusRateLimitError(id, 'blocked', blockedUntil - time);
      else if (sent.length >= maxQueriesPerMinute)
        refusal = new StatusRateLimitError(id, 'budget', (sent[0] as number) + MINUTE - time);
      if (refusal) {
        stats.refused += 1;
        throw refusal;
      }
      sent.push(time);
      stats.queries += 1;
    },

    /** The service answered like a block: send nothing for the cool-down (or its `Retry-After`, if longer). */
    blocked(retryAfterMs = 0): void {
      blockedUntil = Math.max(blockedUntil, now() + Math.max(blockCooldownMs, retryAfterMs));
    },
  };
}
