import { createPendingWrites } from '../../../lib/delivery/pending-writes.js';

/** A write the test settles: `done()` resolves it, `fail()` rejects it. */
function write() {
  let done = (): void => {};
  let fail: (error: Error) => void = () => {};
  const pending = new Promise<void>((resolve, reject) => {
    done = resolve;
    fail = reject;
  });
  return { pending, done: () => done(), fail: (error: Error) => fail(error) };
}

describe('createPendingWrites', () => {
  test('counts a write until it settles, rejected ones included; the caller keeps its promise', async () => {
    const writes = createPendingWrites();
    const a = write();
    const b = write();
    expect(writes.add(a.pending)).toBe(a.pending);
    const caught = writes.add(b.pending).catch((error: Error) => error.message);
    expect(writes.size).toBe(2);
    a.done();
    b.fail(new Error('the store is down'));
    expect(await caught).toBe('the store is down');
    await Promise.resolve();
    expect(writes.size).toBe(0);
  });

  test('settled() resolves 0 at once with nothing running', async () => {
    expect(await createPendingWrites().settled(1_000_000)).toBe(0);
  });

  test('settled() waits for a write added while it waits (a release started by a failed decision)', async () => {
    const writes = createPendingWrites();
    const first = write();
    const second = write();
    void writes.add(first.pending.then(() => void writes.add(second.pending)));
    const settled = writes.settled(1_000_000);
    first.done();
    let resolved: number | undefined;
    void settled.then((left) => (resolved = left));
    await new Promise((resolve) => setImmediate(resolve));
    expect(resolved).toBeUndefined(); // the second write still runs
    second.done();
    expect(await settled).toBe(0);
  });

  test('settled() gives up after its time with how many still run; a rejected write never rejects it', async () => {
    const writes = createPendingWrites();
    const hung = write();
    const failed = write();
    void writes.add(hung.pending);
    writes.add(failed.pending).catch(() => undefined);
    failed.fail(new Error('the store is down'));
    expect(await writes.settled(5)).toBe(1);
  });
});
