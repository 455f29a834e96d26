/**
 * The clock of the status client, `since`, the verify queue and delivery: ms since the epoch, but monotonic (never steps back).
 * Under a fake `performance` (jest's and sinon's fake timers replace it with one whose `timeOrigin` is not a
 * number), it is `Date.now()`, faked with it: else the sum would not be a number, and every interval,
 * cool-down and 429 wait of the guard would silently stop holding.
 */
export const monotonicNow = (): number => {
  const origin: unknown = performance.timeOrigin;
  return typeof origin === 'number' ? origin + performance.now() : Date.now();
};
