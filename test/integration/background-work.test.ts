import { ipnRouter, MemoryStore, type DurableStore } from '../../lib/index.js';
import { eventually } from '../helpers/services.js';
import { quiet } from '../helpers/quiet-logger.js';

// A scale-to-zero database (Neon) suspends only when nothing queries it. With backgroundWork: 'drain', an
// idle instance makes no store call at all; the scheduler's ipn.drain() does the periodic work.

/** A MemoryStore whose every method call (each one a query on a real database) is counted. */
function countingStore(): { store: DurableStore; calls: string[] } {
  const calls: string[] = [];
  const inner = new MemoryStore();
  const store = new Proxy(inner, {
    get(target, name, receiver) {
      const value: unknown = Reflect.get(target, name, receiver);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        calls.push(String(name));
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { store, calls };
}

const periodic = ['lease', 'purge', 'lockSweep', 'due'];

test("backgroundWork: 'drain' makes no store call while idle; 'timers' polls; drain() does the work", async () => {
  const quietOne = countingStore();
  const polling = countingStore();
  const options = {
    delivery: 'at-least-once',
    recoveryIntervalMs: 5,
    sweepIntervalMs: 5,
    logger: quiet,
  } as const;
  const drained = ipnRouter({ ...options, store: quietOne.store, backgroundWork: 'drain' });
  const timed = ipnRouter({ ...options, store: polling.store });
  for (const ipn of [drained, timed]) ipn.on('successful', () => {});
  await drained.expect('EFB.000001', { amount: 100 });
  await timed.expect('EFB.000002', { amount: 100 });

  await eventually(
    'the timers run a few recovery passes',
    () => polling.calls.filter((call) => call === 'lease').length >= 3,
  );
  expect(quietOne.calls.filter((call) => periodic.includes(call))).toEqual([]);

  // The scheduler's call does what the timers would have.
  await drained.drain();
  expect(quietOne.calls).toContain('lease');
  await Promise.all([drained.close(), timed.close()]);
});

test("backgroundWork must be 'timers' or 'drain'", () => {
  expect(() => ipnRouter({ backgroundWork: 'cron' as never })).toThrow(TypeError);
});
