import { createBatcher } from '../../../lib/stores/batcher.js';

/** A batch runner whose batches the test settles by hand. */
function manual() {
  const batches: Array<{ items: number[]; resolve: () => void; reject: (error: Error) => void }> = [];
  const run = (items: number[]) =>
    new Promise<string[]>((resolve, reject) => {
      batches.push({ items, resolve: () => resolve(items.map((item) => `stored ${item}`)), reject });
    });
  return { batches, run };
}
const turn = () => new Promise((resolve) => setImmediate(resolve));

describe('createBatcher (group commit)', () => {
  test('a lone call goes at once; calls made while it runs go together as the next batch', async () => {
    const { batches, run } = manual();
    const call = createBatcher(run);
    const first = call(1);
    await turn();
    expect(batches.map(({ items }) => items)).toEqual([[1]]);
    const rest = [call(2), call(3), call(4)];
    await turn();
    expect(batches).toHaveLength(1); // one batch at a time
    batches[0]!.resolve();
    await expect(first).resolves.toBe('stored 1');
    await turn();
    expect(batches.map(({ items }) => items)).toEqual([[1], [2, 3, 4]]);
    batches[1]!.resolve();
    await expect(Promise.all(rest)).resolves.toEqual(['stored 2', 'stored 3', 'stored 4']);
  });

  test('a failed batch rejects each of its calls, and only those', async () => {
    const { batches, run } = manual();
    const call = createBatcher(run);
    const first = call(1);
    await turn();
    const second = [call(2), call(3)];
    batches[0]!.reject(new Error('connection lost'));
    await expect(first).rejects.toThrow('connection lost');
    await turn();
    batches[1]!.resolve();
    await expect(Promise.all(second)).resolves.toEqual(['stored 2', 'stored 3']);
  });

  test('a batch that never settles gives up its place after stallMs: the calls behind it go on', async () => {
    const { batches, run } = manual();
    const call = createBatcher(run, { stallMs: () => 50 });
    const stuck = call(1);
    await turn();
    const behind = call(2);
    await turn();
    expect(batches).toHaveLength(1);
    await new Promise((resolve) => setTimeout(resolve, 80));
    expect(batches.map(({ items }) => items)).toEqual([[1], [2]]);
    batches[1]!.resolve();
    await expect(behind).resolves.toBe('stored 2');
    // The stuck one settles late: it still answers its own call, and frees no second place.
    batches[0]!.resolve();
    await expect(stuck).resolves.toBe('stored 1');
    const later = [call(3), call(4)];
    await turn();
    expect(batches.map(({ items }) => items)).toEqual([[1], [2], [3]]);
    batches[2]!.resolve();
    await turn();
    batches[3]!.resolve();
    await expect(Promise.all(later)).resolves.toEqual(['stored 3', 'stored 4']);
  });

  test('maxBatch bounds one statement; maxInFlight lets several run at once', async () => {
    const { batches, run } = manual();
    const call = createBatcher(run, { maxInFlight: 2, maxBatch: 2 });
    const calls = [1, 2, 3, 4, 5, 6].map((item) => call(item));
    await turn();
    expect(batches.map(({ items }) => items)).toEqual([[1], [2]]);
    batches[0]!.resolve();
    await turn();
    await turn();
    expect(batches.map(({ items }) => items)).toEqual([[1], [2], [3, 4]]);
    batches[1]!.resolve();
    await turn();
    await turn();
    expect(batches.map(({ items }) => items)).toEqual([[1], [2], [3, 4], [5, 6]]);
    batches[2]!.resolve();
    batches[3]!.resolve();
    await expect(Promise.all(calls)).resolves.toHaveLength(6);
  });
});
