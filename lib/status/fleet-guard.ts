import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { messageOf, StatusRateLimitError, TransactionNotFoundError } from '../shared/errors.js';
import { within } from '../shared/within.js';
import { createSlidingWindow } from '../shared/sliding-window.js';
import type { Logger } from '../observability/logger.js';
import { createLogThrottle } from '../observability/log-throttle.js';
import {
  createQueryGuard,
  isLasting,
  stampSentAt,
  type QueryGuardOptions,
  type StatusClientStats,
} from './query-guard.js';
import type { SharedGuard } from './shared-guard.js';
import { lackingFields, markLacking, type StatusRecord } from './status-envelope.js';

/** What the fleet guard needs beyond the local guard's options. */
export interface FleetGuardOptions extends QueryGuardOptions {
  shared: SharedGuard;
  /** How long one instance may hold an id's lock (its request, retries included), in ms. */
  lockMs: number;
  logger: Logger;
}

const UNREACHABLE = Symbol('unreachable');
const MINUTE = 60_000;
/** How often an instance waiting for another's answer looks for it, in ms. */
const POLL_MS = 50;
/** At most one warning a minute while the shared store stays unreachable. */
const WARN_EVERY_MS = 60_000;

/**
 * A guard shared by every instance through `shared` (Redis): one budget, one cool-down, one cache, one
 * request per id at a time, fleet-wide. The local guard still answers what this process already knows and
 * joins its own concurrent calls. When the shared store is unreachable, a local budget divided by
 * `fallbackInstances` is used, or nothing is sent at all.
 */
export function createFleetGuard(options: FleetGuardOptions) {
  const { shared, lockMs, minIntervalMs, maxQueriesPerMinute, logger, now } = options;
  const local = createQueryGuard(options);
  const instances = shared.fallbackInstances;
  /** This instance's share of the budget while the shared store is unreachable. */
  const share = instances === undefined ? 0 : Math.max(1, Math.floor(maxQueriesPerMinute / instances));
  const fallback =
    instances === undefined ? undefined : createQueryGuard({ ...options, maxQueriesPerMinute: share });
  // Every request this instance sent in the last minute, through the fleet's budget or its share: when the
  // shared store dies mid-burst, what it already sent this minute counts against its share.
  const sentHere = createSlidingWindow(MINUTE);
  const sentLastMinute = (): number => sentHere.count(now());
  const noteSent = (): void => sentHere.add(now());
  let blockedUntil = 0;
  let left = maxQueriesPerMinute;
  const unreachableWarning = createLogThrottle({ everyMs: WARN_EVERY_MS, now });
  const counts = { queries: 0, refused: 0, guardFailures: 0 };
  let mode: 'shared' | 'fallback' = 'shared';
  const stats: StatusClientStats & { readonly guard: 'shared' | 'fallback'; readonly guardFailures: number } =
    {
      get queries() {
        return counts.queries;
      },
      get refused() {
        return counts.refused;
      },
      get cached() {
        return local.stats.cached;
      },
      get shared() {
        return local.stats.shared;
      },
      get budgetLeft() {
        if (now() < blockedUntil) return 0;
        if (mode === 'shared') return left;
        return fallback ? Math.min(fallback.stats.budgetLeft, Math.max(0, share - sentLastMinute())) : 0;
      },
      get guard() {
        return mode;
      },
      get guardFailures() {
        return counts.guardFailures;
      },
    };

  /** Runs one call to the shared store within its time limit; `UNREACHABLE` (and a warning) when it fails. */
  async function call<T>(what: string, run: () => Promise<T>): Promise<T | typeof UNREACHABLE> {
    try {
      const result = await within(
        run(),
        shared.timeoutMs,
        () => new Error(`no answer within ${shared.timeoutMs} ms`),
      );
      if (mode === 'fallback')
        logger.info({}, 'the shared status-query guard answers again: back to the fleet budget');
      mode = 'shared';
      return result;
    } catch (error) {
      counts.guardFailures += 1;
      mode = 'fallback';
      if (unreachableWarning.note() !== undefined) {
        logger.warn(
          { err: { message: messageOf(error) }, fallbackInstances: instances ?? null },
          `the shared status-query guard is unreachable (${what}): ${
            fallback
              ? `using a local budget of ${share} a minute`
              : 'sending no status query until it answers'
          }`,
        );
      }
      return UNREACHABLE;
    }
  }

  const refuse = (id: string, reason: StatusRateLimitError['reason'], retryAfterMs: number): never => {
    counts.refused += 1;
    throw new StatusRateLimitError(id, reason, retryAfterMs);
  };

  function permitLocally(id: string): void {
    if (!fallback) return refuse(id, 'guard_unavailable', 5_000);
    const time = now();
    if (sentHere.count(time) >= share) return refuse(id, 'budget', sentHere.msUntilOldestLeaves(time));
    try {
      fallback.permit(id);
    } catch (error) {
      counts.refused += 1;
      throw error;
    }
    noteSent();
    counts.queries += 1;
  }

  /** An answer as the shared cache keeps it: with when it was asked, and the fields a partial record lacks. */
  const encode = (answer: StatusRecord | TransactionNotFoundError, at: number): string | undefined => {
    try {
      return answer instanceof TransactionNotFoundError
        ? JSON.stringify({ notFound: true, at })
        : JSON.stringify({ record: answer, at, lacking: lackingFields(answer) });
    } catch {
      return undefined; // not JSON (a BigInt): this answer is simply not shared
    }
  };
  /** A cached answer, if it is one for `id`: an entry naming another transaction is never taken. */
  const decode = (
    id: string,
    text: string,
  ): { answer: StatusRecord | TransactionNotFoundError; at: number } | undefined => {
    try {
      const value = JSON.parse(text) as {
        record?: StatusRecord;
        notFound?: boolean;
        at?: unknown;
        lacking?: unknown;
      };
      // An entry written before `at` was kept counts as old: a caller needing a newer answer asks again.
      const at = typeof value.at === 'number' ? value.at : 0;
      if (value.notFound === true) return { answer: new TransactionNotFoundError(id), at };
      if (value.record?.transaction_id === id) {
        const lacking = Array.isArray(value.lacking) ? value.lacking.map(String) : [];
        return { answer: markLacking(value.record, lacking), at };
      }
    } catch {
      // unreadable: ask again
    }
    return undefined;
  };
  const settleWith = (answer: StatusRecord | TransactionNotFoundError): StatusRecord => {
    if (answer instanceof TransactionNotFoundError) throw answer;
    return answer;
  };

  /** The fleet-wide step: the shared cache, then the id's lock (one instance asks, the others wait for it). */
  async function askFleet(
    id: string,
    query: () => Promise<StatusRecord>,
    since: number | undefined,
  ): Promise<StatusRecord> {
    const deadline = now() + lockMs * 2;
    const token = randomUUID();
    for (;;) {
      const cached = await call('read', () => shared.read(id));
      if (cached === UNREACHABLE) return query();
      const entry = cached === undefined ? undefined : decode(id, cached);
      if (entry !== undefined && (since === undefined || entry.at > since))
        return settleWith(stampSentAt(entry.answer, entry.at));
      if (entry !== undefined && now() - entry.at < minIntervalMs) {
        counts.refused += 1;
        throw new StatusRateLimitError(id, 'interval', entry.at + minIntervalMs - now());
      }
      const locked = await call('lock', () => shared.lock(id, token, lockMs));
      if (locked === UNREACHABLE) return query();
      if (locked) return askHoldingLock(id, token, query, since);
      // Another instance is asking: its answer lands in the cache, or its lock lapses and this one asks.
      if (now() > deadline) return query();
      await sleep(POLL_MS);
    }
  }

  async function askHoldingLock(
    id: string,
    token: string,
    query: () => Promise<StatusRecord>,
    since: number | undefined,
  ) {
    const at = now();
    const share = async (answer: StatusRecord | TransactionNotFoundError, ttlMs: number) => {
      const text = encode(answer, at);
      if (text !== undefined && ttlMs > 0) await call('write', () => shared.write(id, text, ttlMs));
    };
    try {
      // The holder before this one may have cached its answer and freed the lock between this instance's
      // read and its lock: read again under the lock, or the same id is asked twice. Under the same rules
      // as the first read: an answer older than `since` is never taken for a newer one.
      const cached = await call('read', () => shared.read(id));
      const entry = cached === UNREACHABLE || cached === undefined ? undefined : decode(id, cached);
      if (entry !== undefined && (since === undefined || entry.at > since))
        return settleWith(stampSentAt(entry.answer, entry.at));
      if (entry !== undefined && now() - entry.at < minIntervalMs) {
        counts.refused += 1;
        throw new StatusRateLimitError(id, 'interval', entry.at + minIntervalMs - now());
      }
      const record = await query();
      await share(record, isLasting(record) ? shared.finalTtlMs : minIntervalMs);
      return record;
    } catch (error) {
      if (error instanceof TransactionNotFoundError) await share(error, minIntervalMs);
      throw error;
    } finally {
      await call('unlock', () => shared.unlock(id, token));
    }
  }

  return {
    stats,
    ask: (id: string, query: () => Promise<StatusRecord>, since?: number): Promise<StatusRecord> =>
      local.ask(id, () => askFleet(id, query, since), since),

    /** Takes one request from the fleet's budget, or from the fallback's, or refuses. */
    async permit(id: string): Promise<void> {
      const time = now();
      if (time < blockedUntil) return refuse(id, 'blocked', blockedUntil - time);
      const permit = await call('take', () => shared.take(maxQueriesPerMinute));
      if (permit === UNREACHABLE) return permitLocally(id);
      left = permit.left;
      if (!permit.granted) return refuse(id, permit.reason ?? 'budget', permit.retryAfterMs);
      noteSent();
      counts.queries += 1;
    },

    /** A block seen here starts the fleet's cool-down, and this instance's own in case that write fails. */
    blocked(retryAfterMs = 0): void {
      const ms = Math.max(options.blockCooldownMs, retryAfterMs);
      blockedUntil = Math.max(blockedUntil, now() + ms);
      fallback?.blocked(ms);
      void call('block', () => shared.block(ms));
    },
  };
}
