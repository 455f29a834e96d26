import { StatusRateLimitError, TransactionNotFoundError } from '../shared/errors.js';
import { createSlidingWindow } from '../shared/sliding-window.js';
import { isFinalState } from '../notification/schema.js';
import { lackingFields, type StatusRecord } from './status-envelope.js';

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
  /** With several keys (`apiKeys`): each account's own figures; the ones above are their sums. */
  readonly accounts?: Readonly<Record<string, StatusClientStats>>;
}

const MINUTE = 60_000;

/**
 * What `getStatus` may be told about the answer it must give.
 * @inline
 */
export interface StatusQueryOptions {
  /**
   * Only an answer to a request sent after this time (ms since the epoch, as `performance.timeOrigin + performance.now()` or
   * `Date.now()` gives) will do: a cached one that is older is not used, and the service is asked again,
   * unless the id was asked less than `minIntervalMs` ago: then the call fails at once with
   * `StatusRateLimitError` (reason `interval`, with the wait). `verify` uses it so that an answer older than
   * the notification never condemns it.
   */
  since?: number | undefined;
  /**
   * The account (of `apiKeys`) whose key created the transaction: its key is asked first, and the other keys
   * only after its not-found, each in turn. Unset, each key is tried in turn until one finds it. An account
   * the client does not hold rejects with a `TypeError`.
   */
  account?: string | undefined;
  /**
   * The account the router's `accountOf` names for the notification: a guess, weaker than `account` and than
   * the expectation's account. The router's wrapper asks with it only when neither names one, and only when
   * the client holds a key for it (else each key in turn); a status client itself ignores it.
   */
  accountGuess?: string | undefined;
  /**
   * Told of each key this call asks (its account: `'default'` with `apiKey`), in turn, once that key's guard
   * let the query through, answered from its cache, or failed other than by refusing it
   * (`StatusRateLimitError`): one call per key asked, none for a key whose budget or cool-down refused. The
   * sweep counts its `queried` so. A throw of it is ignored.
   */
  onQuery?: ((account: string) => void) | undefined;
}

/** A cached answer, and when the request that got it was sent (on the guard's clock). */
interface Entry {
  answer: StatusRecord | typeof NOT_FOUND;
  at: number;
}

/**
 * When the request behind an answer was sent, for answers that come from elsewhere (the fleet's shared
 * cache): a local cache must not take an old answer for a new one.
 */
const sentAt = new WeakMap<object, number>();

/** Marks `answer` (a record, or a not-found error) as the answer to a request sent at `at`. */
export function stampSentAt<T extends object>(answer: T, at: number): T {
  sentAt.set(answer, at);
  return answer;
}

/** A cached not-found: no error object (with its stack) is kept per id. */
const NOT_FOUND = Symbol('not found');

/**
 * A final answer is cached for good only when it is complete: one that lacks the amount or `custom_data`
 * can neither confirm nor contradict a notification, so it is asked again after `minIntervalMs`.
 */
export function isLasting(record: StatusRecord): boolean {
  return isFinalState(record.state) && lackingFields(record).length === 0;
}

/**
 * Keeps a status client sparing: one request in flight per id, final answers cached, non-final and
 * not-found answers reused for `minIntervalMs`, at most `maxQueriesPerMinute` requests in any 60 s window,
 * and nothing at all during a cool-down after the service looked like it was blocking. A caller that needs
 * an answer newer than a time (`since`) gets one, at most once per `minIntervalMs` per id.
 */
export function createQueryGuard(options: QueryGuardOptions) {
  const { maxQueriesPerMinute, minIntervalMs, blockCooldownMs, cacheSize, now } = options;
  const inflight = new Map<string, { at: number; promise: Promise<StatusRecord> }>();
  const finals = new Map<string, Entry>();
  const recent = new Map<string, Entry>();
  const sent = createSlidingWindow(MINUTE); // the requests sent within the last minute
  let blockedUntil = 0;
  const stats: StatusClientStats = {
    queries: 0,
    refused: 0,
    cached: 0,
    shared: 0,
    get budgetLeft() {
      const time = now();
      return time < blockedUntil ? 0 : Math.max(0, maxQueriesPerMinute - sent.count(time));
    },
  };

  const remember = (map: Map<string, Entry>, id: string, value: Entry): void => {
    finals.delete(id);
    recent.delete(id);
    map.set(id, value);
    // Oldest first out: a Map iterates in insertion order.
    if (map.size > cacheSize) map.delete(map.keys().next().value as string);
  };

  /** The cached answer of `id` a caller may use: any newer than `since`; else a final one, or a recent one. */
  function cachedEntry(id: string, since: number | undefined): Entry | undefined {
    const entry = finals.get(id) ?? recent.get(id);
    if (entry === undefined) return undefined;
    if (since !== undefined && entry.at > since) return entry;
    if (finals.has(id) || now() - entry.at < minIntervalMs) return entry;
    recent.delete(id);
    return undefined;
  }

  /** Refuses a call that needs a newer answer than the one of `at`, when the id was asked too recently. */
  const tooSoon = (id: string, at: number): StatusRateLimitError | undefined => {
    const wait = at + minIntervalMs - now();
    if (wait <= 0) return undefined;
    stats.refused += 1;
    return new StatusRateLimitError(id, 'interval', wait);
  };

  return {
    stats,

    /**
     * Answers from the cache, joins a request in flight, or starts `query`, which must call `permit()` before
     * each request it sends. With `since`, only an answer to a request sent after it will do.
     */
    ask(id: string, query: () => Promise<StatusRecord>, since?: number): Promise<StatusRecord> {
      const cached = cachedEntry(id, since);
      if (cached !== undefined) {
        if (since === undefined || cached.at > since) {
          stats.cached += 1;
          const { answer } = cached;
          return answer === NOT_FOUND
            ? Promise.reject(new TransactionNotFoundError(id))
            : Promise.resolve(answer);
        }
        const refusal = tooSoon(id, cached.at);
        if (refusal) return Promise.reject(refusal);
      }
      const pending = inflight.get(id);
      if (pending) {
        if (since !== undefined && pending.at <= since) {
          // Sent before `since`, and one request per id at a time: ask again once it has answered.
          stats.refused += 1;
          const wait = Math.max(pending.at + minIntervalMs - now(), 1_000);
          return Promise.reject(new StatusRateLimitError(id, 'interval', wait));
        }
        stats.shared += 1;
        return pending.promise;
      }
      const at = now();
      const started = query().then(
        (record) => {
          const when = sentAt.get(record) ?? at;
          remember(isLasting(record) ? finals : recent, id, { answer: record, at: when });
          return record;
        },
        (error: unknown) => {
          if (error instanceof TransactionNotFoundError)
            remember(recent, id, { answer: NOT_FOUND, at: sentAt.get(error) ?? at });
          throw error;
        },
      );
      const tracked = started.finally(() => inflight.delete(id));
      inflight.set(id, { at, promise: tracked });
      return tracked;
    },

    /** Takes one request from the budget, or throws `StatusRateLimitError` when none may be sent now. */
    permit(id: string): void {
      const time = now();
      let refusal: StatusRateLimitError | undefined;
      if (time < blockedUntil) refusal = new StatusRateLimitError(id, 'blocked', blockedUntil - time);
      else if (sent.count(time) >= maxQueriesPerMinute)
        refusal = new StatusRateLimitError(id, 'budget', sent.msUntilOldestLeaves(time));
      if (refusal) {
        stats.refused += 1;
        throw refusal;
      }
      sent.add(time);
      stats.queries += 1;
    },

    /** The service answered like a block: send nothing for the cool-down (or its `Retry-After`, if longer). */
    blocked(retryAfterMs = 0): void {
      blockedUntil = Math.max(blockedUntil, now() + Math.max(blockCooldownMs, retryAfterMs));
    },
  };
}
