/**
 * The times of recent events within a window of `widthMs` that slides with the clock: a rate limit ("at
 * most N a minute") that holds over any such span, not per calendar minute. Every method takes the current
 * time, so a caller that reads its clock once decides on one instant.
 */
export interface SlidingWindow {
  /** How many events fall in the window ending at `at` (older ones are dropped). */
  count(at: number): number;
  /** Records an event at `at`, no earlier than the last one recorded. */
  add(at: number): void;
  /** How long after `at` the oldest event in the window leaves it (and one more fits); 0 when none is in it. */
  msUntilOldestLeaves(at: number): number;
}

/**
 * A {@link SlidingWindow}: it holds only the events of the last `widthMs`, so its size is bounded by the
 * rate it is used to limit. An event exactly `widthMs` old has left the window.
 */
export function createSlidingWindow(widthMs: number): SlidingWindow {
  const times: number[] = []; // oldest first
  const prune = (at: number): void => {
    while (times.length > 0 && (times[0] as number) <= at - widthMs) times.shift();
  };
  return {
    count(at) {
      prune(at);
      return times.length;
    },
    add(at) {
      prune(at); // the list never holds more than a window's events
      times.push(at);
    },
    msUntilOldestLeaves(at) {
      prune(at);
      const oldest = times[0];
      return oldest === undefined ? 0 : oldest + widthMs - at;
    },
  };
}
