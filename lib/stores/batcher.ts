import { StoreError } from '../shared/errors.js';

/**
 * How long a batch may run before it stops holding its place, until a router tells the store its own
 * `storeTimeoutMs` (`Store.useStoreTimeout`): the router's default.
 */
export const STALLED_BATCH_MS = 5_000;

/**
 * Group commit without a timer: a call is sent at once while fewer than `maxInFlight` batches are running;
 * calls that come while they are all running wait for one to finish and then go together, as one batch
 * (one statement, one commit). So a lone call is never delayed, and a burst costs a few commits instead of
 * one each. When a batch fails, each of its calls rejects with that failure: nothing is answered as stored
 * that was not.
 *
 * One batch at a time by default: the calls that queue behind it make the next batch larger, and each
 * statement saved is a commit and a plan the database does not make (the benchmark's PostgreSQL spends
 * more CPU per notification than the router). A batch still running after `stallMs` (a connection stuck
 * behind a dropped network, with no query timeout on the pool) gives up its place, so that the calls
 * behind it go on, and fail or succeed on their own, instead of queueing without end. `stallMs` is read
 * for each batch: the store follows the router's `storeTimeoutMs`.
 *
 * `run` gets the items of one batch and resolves one result per item, in order. Used by the stores of every
 * backend that has round trips to save: PostgreSQL's and MySQL's receives and settlements, Redis's claims.
 */
export function createBatcher<I, O>(
  run: (items: I[]) => Promise<O[]>,
  {
    maxInFlight = 1,
    maxBatch = 500,
    stallMs = (): number => STALLED_BATCH_MS,
  }: { maxInFlight?: number; maxBatch?: number; stallMs?: () => number } = {},
): (item: I) => Promise<O> {
  let inFlight = 0;
  const queue: Array<{ item: I; resolve: (value: O) => void; reject: (error: unknown) => void }> = [];

  function send(): void {
    while (inFlight < maxInFlight && queue.length > 0) {
      const batch = queue.splice(0, maxBatch);
      inFlight += 1;
      let holding = true;
      const free = (): void => {
        if (!holding) return;
        holding = false;
        inFlight -= 1;
        send();
      };
      const stalled = setTimeout(free, stallMs());
      stalled.unref();
      Promise.resolve()
        .then(() => run(batch.map(({ item }) => item)))
        .then((results) => {
          if (results.length !== batch.length) {
            // A bug of the store's own: its callers see a StoreError, as for any failed write.
            throw new StoreError(
              `ipn-kit: a batch of ${batch.length} writes resolved ${results.length} results`,
            );
          }
          batch.forEach(({ resolve }, index) => resolve(results[index]!));
        })
        .catch((error: unknown) => {
          for (const { reject } of batch) reject(error);
        })
        .finally(() => {
          clearTimeout(stalled);
          free();
        });
    }
  }

  return (item) =>
    new Promise<O>((resolve, reject) => {
      queue.push({ item, resolve, reject });
      send();
    });
}

/**
 * How long a store's batches may run before they stop holding their place: {@link STALLED_BATCH_MS} until a
 * router tells the store its `storeTimeoutMs` (`Store.useStoreTimeout`; several routers on one store: the
 * shortest wins). A batch stuck that long on its connection (a network partition) then gives up its place,
 * so that the calls behind it are sent on their own instead of queueing until the router answers them 503.
 */
export class BatchStall {
  #ms = STALLED_BATCH_MS;

  /** The stall now, as {@link createBatcher}'s `stallMs` reads it for each batch. */
  readonly ms = (): number => this.#ms;

  /** Takes a router's `storeTimeoutMs` when it is shorter; ignores anything but a positive number. */
  use(storeTimeoutMs: number): void {
    if (Number.isFinite(storeTimeoutMs) && storeTimeoutMs > 0) this.#ms = Math.min(this.#ms, storeTimeoutMs);
  }
}
