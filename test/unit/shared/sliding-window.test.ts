import { createSlidingWindow } from '../../../lib/shared/sliding-window.js';

describe('createSlidingWindow', () => {
  test('counts the events of the last widthMs, an event exactly widthMs old having left', () => {
    const window = createSlidingWindow(60_000);
    window.add(1_000);
    window.add(2_000);
    window.add(30_000);

    expect(window.count(30_000)).toBe(3);
    expect(window.count(60_999)).toBe(3);
    expect(window.count(61_000)).toBe(2);
    expect(window.count(62_000)).toBe(1);
    expect(window.count(90_000)).toBe(0);
  });

  test('counts nothing before any event, and answers no wait', () => {
    const window = createSlidingWindow(1_000);
    expect(window.count(5_000)).toBe(0);
    expect(window.msUntilOldestLeaves(5_000)).toBe(0);
  });

  test('says how long until the oldest event in the window leaves it', () => {
    const window = createSlidingWindow(60_000);
    window.add(10_000);
    window.add(20_000);

    expect(window.msUntilOldestLeaves(25_000)).toBe(45_000);
    // The first has left at 70,000: the wait is then the second's.
    expect(window.msUntilOldestLeaves(70_000)).toBe(10_000);
    expect(window.msUntilOldestLeaves(80_000)).toBe(0);
  });

  test('a window that slid past every event starts counting afresh', () => {
    const window = createSlidingWindow(100);
    for (let at = 0; at < 50; at += 10) window.add(at);
    expect(window.count(49)).toBe(5);

    window.add(500);
    expect(window.count(500)).toBe(1);
    expect(window.msUntilOldestLeaves(500)).toBe(100);
  });

  test('holds one event per add: two at the same instant count twice', () => {
    const window = createSlidingWindow(1_000);
    window.add(7);
    window.add(7);
    expect(window.count(7)).toBe(2);
  });
});
