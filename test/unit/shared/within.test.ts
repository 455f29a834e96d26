import { within } from '../../../lib/shared/within.js';

class Late extends Error {}
const late = () => new Late('no answer in time');
/** Timers that are ref'd: what keeps a closing process alive. */
const liveTimers = () => process.getActiveResourcesInfo().filter((name) => name === 'Timeout').length;

describe('within', () => {
  afterEach(() => jest.useRealTimers());

  test('settles as pending does when it settles in time', async () => {
    await expect(within(Promise.resolve('answer'), 1_000, late)).resolves.toBe('answer');
    const failure = new Error('store down');
    await expect(within(Promise.reject(failure), 1_000, late)).rejects.toBe(failure);
  });

  test('takes a plain value as a settled answer', async () => {
    await expect(within(42, 1_000, late)).resolves.toBe(42);
  });

  test('rejects with the error timeout() builds once ms have passed, and builds none before', async () => {
    jest.useFakeTimers();
    const timeout = jest.fn(late);
    const bounded = within(new Promise<never>(() => {}), 500, timeout);
    const outcome = bounded.catch((error: unknown) => error);

    jest.advanceTimersByTime(499);
    expect(timeout).not.toHaveBeenCalled();
    jest.advanceTimersByTime(1);

    expect(await outcome).toBeInstanceOf(Late);
    expect(timeout).toHaveBeenCalledTimes(1);
  });

  test('ignores what pending does after the time limit: no second outcome, no unhandled rejection', async () => {
    jest.useFakeTimers({ doNotFake: ['setImmediate'] });
    let fail: (error: Error) => void = () => {};
    const pending = new Promise<string>((_resolve, reject) => (fail = reject));
    const outcome = within(pending, 10, late).catch((error: unknown) => error);
    jest.advanceTimersByTime(10);
    expect(await outcome).toBeInstanceOf(Late);

    const unhandled = jest.fn();
    process.on('unhandledRejection', unhandled);
    try {
      fail(new Error('answered too late'));
      await new Promise((resolve) => setImmediate(resolve));
      expect(unhandled).not.toHaveBeenCalled();
    } finally {
      process.off('unhandledRejection', unhandled);
    }
  });

  test('clears its timer as soon as pending settles', async () => {
    jest.useFakeTimers();
    const bounded = within(Promise.resolve('in time'), 60_000, late);
    expect(jest.getTimerCount()).toBe(1);

    await expect(bounded).resolves.toBe('in time');
    expect(jest.getTimerCount()).toBe(0);
  });

  test('never keeps the process alive while it waits', async () => {
    const before = liveTimers();
    let answer: (value: string) => void = () => {};
    const bounded = within(new Promise<string>((resolve) => (answer = resolve)), 60_000, late);

    expect(liveTimers()).toBe(before);
    answer('in time');
    await expect(bounded).resolves.toBe('in time');
  });
});
