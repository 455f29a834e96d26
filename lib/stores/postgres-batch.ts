/**
 * Group commit without a timer: a call is sent at once while fewer than `maxInFlight` batches are running;
 * calls that come while they are all running wait for one to finish and then go together, as one batch
 * (one statement, one commit). So a lone call is never delayed, and a burst costs a few commits instead of
 * one each. When a batch fails, each of its calls rejects with that failure: nothing is answered as stored
 * that was not.
 *
 * `run` gets the items of one batch and resolves one result per item, in order.
 */
export function createBatcher<I, O>(
  run: (items: I[]) => Promise<O[]>,
  maxInFlight = 2,
  maxBatch = 500,
): (item: I) => Promise<O> {
  let inFlight = 0;
  let queue: Array<{ item: I; resolve: (value: O) => void; reject: (error: unknown) => void }> = [];

  function send(): void {
    while (inFlight < maxInFlight && queue.length > 0) {
      const batch = queue.slice(0, maxBatch);
      queue = queue.slice(batch.length);
      inFlight += 1;
      Promise.resolve()
        .then(() => run(batch.map(({ item }) => item)))
        .then((results) => {
          if (results.length !== batch.length) {
            throw new Error(`a batch of ${batch.length} resolved ${results.length} results`);
          }
          batch.forEach(({ resolve }, index) => resolve(results[index]!));
        })
        .catch((error: unknown) => {
          for (const { reject } of batch) reject(error);
        })
        .finally(() => {
          inFlight -= 1;
          send();
        });
    }
  }

  return (item) =>
    new Promise<O>((resolve, reject) => {
      queue.push({ item, resolve, reject });
      send();
    });
}
