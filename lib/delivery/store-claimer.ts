import { randomUUID } from 'node:crypto';
import { messageOf, StoreError } from '../shared/errors.js';
import { within } from '../shared/within.js';
import type { Awaitable, Store } from '../stores/store.js';

/**
 * Claims dedupe keys through a store, in bounded time: `init` once (again only after it failed), then
 * `claim`, with `timeoutMs` for both together. A synchronous store answers without any timer.
 */
export function createStoreClaimer(store: Store, ttlMs: number, timeoutMs: number) {
  store.useStoreTimeout?.(timeoutMs);
  let initialised: Promise<void> | undefined;
  let ready = store.init === undefined;

  function initialise(): Promise<void> {
    // Deferred by a tick, so that a failure clears `initialised` after it was assigned, not before.
    const attempt: Promise<void> = Promise.resolve()
      .then(() => store.init?.())
      .then(
        () => {
          ready = true;
        },
        (error: unknown) => {
          if (initialised === attempt) initialised = undefined; // the next request tries again
          throw error;
        },
      );
    return attempt;
  }

  /** The lost answers waiting to be asked again: at `close()`, each is asked once more at once. */
  const timers = new Map<NodeJS.Timeout, () => void>();
  let closed = false;
  /** Given to `close()`: what becomes of a lost answer asked about a last time (see {@link LetGo}). */
  let letGo: LetGo | undefined;
  /** Counts a claim still running past its answer (see {@link track}): `close()` waits for it. */
  let tracking: ((pending: Promise<unknown>) => unknown) | undefined;

  /**
   * A claim whose answer never came (the store rejected: a connection reset, maybe after the write) is asked
   * again in the background with the same token, until the store answers: `true` means it was this
   * caller's, and `late` delivers it (the service's resend is then a duplicate); `false`, another's. Once
   * the router closes, it is asked a last time at once instead (see {@link askLast}).
   */
  function askAgain(key: string, operation: () => Awaitable<boolean>, late: () => void, attempt = 0): void {
    if (attempt >= LOST_ANSWER_RETRIES) return;
    if (closed) return askLast(key, operation);
    const timer = setTimeout(
      () => {
        timers.delete(timer);
        const asked = Promise.resolve()
          .then(operation)
          .then(
            (claimed) => {
              if (claimed === true) safely(late);
            },
            () => askAgain(key, operation, late, attempt + 1),
          );
        // Counted until it settled (its late delivery started): close() waits for it, and for what it starts.
        tracking?.(asked);
      },
      LOST_ANSWER_DELAY_MS * 2 ** attempt,
    );
    timer.unref();
    timers.set(timer, () => askLast(key, operation));
  }

  /**
   * A lost answer still to be asked about as the router closes: asked once more now, counted until settled
   * (`close()` waits for it before the store closes). Found this caller's, the claim is let go rather than
   * delivered (the request was answered 503: the service resends it, to the next process); dropped, it held
   * the key for `ttlMs` with nothing delivered, and that resend was a duplicate. No answer still: reported.
   */
  function askLast(key: string, operation: () => Awaitable<boolean>): void {
    if (letGo === undefined) return;
    const { release, unanswered } = letGo;
    const asked = Promise.resolve()
      .then(operation)
      .then(
        (claimed) => (claimed === true ? release(key) : undefined),
        (cause: unknown) => unanswered(key, cause),
      );
    tracking?.(asked);
  }

  /**
   * Waits for `pending` at most `timeoutMs`. A claim that answers `true` after that still belongs to this
   * caller, which was told the store failed: `late` lets it deliver then (the service's resend, meanwhile or
   * later, is a duplicate), so the notification is neither lost nor delivered twice.
   */
  function bounded(pending: Promise<unknown>, late: () => void, lost?: () => void): Promise<boolean> {
    let timedOut = false;
    // What the claim does after the time limit still matters, so it is watched here (`within` drops it).
    void pending.then(
      (claimed) => {
        if (timedOut && claimed === true) safely(late);
      },
      () => lost && safely(lost),
    );
    const answer = pending.then(checked, (error: unknown) => Promise.reject(asError(error)));
    return within(answer, timeoutMs, () => {
      timedOut = true;
      // Still running past its answer (503): counted until it lands, so that close() waits for it and its
      // late delivery (at most once with verify, its key released as the router closes). Not before: no
      // write per claim on the hot path.
      if (tracking) void tracking(pending.then(undefined, () => undefined));
      return new Error(`no answer within ${timeoutMs} ms`);
    });
  }

  /**
   * `true` (first delivery), `false` (a resend) or a `StoreError` (the store failed or timed out), at once
   * when the store answered synchronously (MemoryStore), else a promise of it. Never throws nor rejects.
   * `operation` replaces `store.claim` (a durable store's `receive`).
   */
  function claimNow(
    key: string,
    late: () => void,
    durable?: () => Awaitable<boolean>,
  ): boolean | StoreError | Promise<boolean | StoreError> {
    const operation = durable ?? claimOf(key);
    // A durable store's receive needs no second asking: the stored entry is taken up by recovery.
    const lost = durable ? undefined : () => askAgain(key, operation, late);
    try {
      if (ready) {
        const claimed = operation();
        if (typeof claimed === 'boolean') return claimed;
        return failedAs(key, bounded(Promise.resolve(claimed), late, lost));
      }
      // One init at a time: one that hangs is waited on again (bounded per request), not started twice.
      const init = (initialised ??= initialise());
      // Only the claim's own failure is a lost answer to ask again about, not a failed init.
      const claim = init.then(() =>
        Promise.resolve(operation()).catch((error: unknown) => {
          lost?.();
          throw error;
        }),
      );
      return failedAs(key, bounded(claim, late));
    } catch (cause) {
      return claimFailed(key, cause);
    }
  }

  /** The claim of `key`, with a token of its own: asked again after a lost answer, it is the same claim. */
  function claimOf(key: string): () => Awaitable<boolean> {
    const token = randomUUID();
    return () => store.claim(key, ttlMs, token);
  }

  return {
    claimNow,

    /** {@link claimNow}, always as a promise. */
    async claim(
      key: string,
      late: () => void,
      durable?: () => Awaitable<boolean>,
    ): Promise<boolean | StoreError> {
      return claimNow(key, late, durable);
    },

    /**
     * Counts, through `add`, each claim still running past its answer (timed out, or asked again after a lost
     * answer) until it lands and its late delivery started: `close()` waits for them before closing the store.
     */
    track(add: (pending: Promise<unknown>) => unknown): void {
      tracking = add;
    },

    /**
     * Stops asking again for lost answers: each one still waiting for its timer (or failing again from now
     * on) is asked a last time at once, and `lastly` decides what becomes of it (without it, dropped).
     */
    close(lastly?: LetGo): void {
      closed = true;
      letGo = lastly;
      const waiting = [...timers];
      timers.clear();
      for (const [timer, last] of waiting) {
        clearTimeout(timer);
        last();
      }
    },
  };
}

/**
 * What `close()` makes of a claim whose answer was lost, asked about a last time: `release` undoes it when
 * it was this caller's (never rejects), `unanswered` reports a store that still did not answer.
 */
export interface LetGo {
  release: (key: string) => unknown;
  unanswered: (key: string, cause: unknown) => void;
}

function claimFailed(key: string, cause: unknown): StoreError {
  return new StoreError(`the store failed to claim ${key}: ${messageOf(cause)}`, { cause });
}

/** `pending`, its failure resolved as a `StoreError`. */
function failedAs(key: string, pending: Promise<boolean>): Promise<boolean | StoreError> {
  return pending.catch((cause: unknown) => claimFailed(key, cause));
}

/** How many times, and from how long a first wait (doubling), a claim whose answer was lost is asked again. */
const LOST_ANSWER_RETRIES = 6;
const LOST_ANSWER_DELAY_MS = 500;

/**
 * A claim must answer `true` or `false`. Anything else (a store that forgets to return, or returns Redis's
 * `'OK'`) is a store failure: taking `undefined` for "already claimed" would drop every payment as a resend.
 */
function checked(claimed: unknown): boolean {
  if (typeof claimed === 'boolean') return claimed;
  throw new TypeError(`store.claim must return true or false (or a promise of it), got ${String(claimed)}`);
}

/** Runs a callback from a detached promise chain, where a throw would become an unhandled rejection. */
function safely(callback: () => void): void {
  try {
    callback();
  } catch {
    // The caller reports its own failures; nothing is left to report to here.
  }
}

function asError(value: unknown): Error {
  return value instanceof Error ? value : new Error(String(value));
}
