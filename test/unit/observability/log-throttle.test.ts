import { createLogThrottle } from '../../../lib/observability/log-throttle.js';

function setup(everyMs = 60_000) {
  let clock = 5_000_000;
  const throttle = createLogThrottle({ everyMs, now: () => clock });
  return { throttle, advance: (ms: number) => (clock += ms) };
}

describe('createLogThrottle', () => {
  test('lets the first occurrence be logged at once, counting it alone', () => {
    const { throttle } = setup();
    expect(throttle.note()).toBe(1);
  });

  test('holds lines back until everyMs have passed since the last one, then counts every occurrence since', () => {
    const { throttle, advance } = setup();
    throttle.note();
    advance(1);
    expect(throttle.note()).toBeUndefined();
    advance(59_998);
    expect(throttle.note()).toBeUndefined();
    advance(1); // 60,000 ms since the first line: due again
    expect(throttle.note()).toBe(3);
  });

  test('starts counting afresh after each line', () => {
    const { throttle, advance } = setup();
    throttle.note();
    advance(60_000);
    expect(throttle.note()).toBe(1);
    throttle.note();
    throttle.note();
    advance(60_000);
    expect(throttle.note()).toBe(3);
  });

  test('measures the interval from the last line written, not from the last occurrence', () => {
    const { throttle, advance } = setup(1_000);
    throttle.note();
    for (let i = 0; i < 9; i += 1) {
      advance(100);
      expect(throttle.note()).toBeUndefined();
    }
    advance(100);
    expect(throttle.note()).toBe(10);
  });

  test('reads Date.now when given no clock', () => {
    const spy = jest.spyOn(Date, 'now').mockReturnValue(1_000);
    try {
      const throttle = createLogThrottle({ everyMs: 10 });
      expect(throttle.note()).toBe(1);
      expect(throttle.note()).toBeUndefined();
      spy.mockReturnValue(1_010);
      expect(throttle.note()).toBe(2);
    } finally {
      spy.mockRestore();
    }
  });
});
