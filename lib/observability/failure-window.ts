/** How many attempts, and how many of them failed, within a window that slides with the clock. */
export interface FailureWindow {
  /** Records one attempt at `at` (ms), failed or not. */
  add(at: number, failed: boolean): void;
  /** The attempts and failures of the window ending at `at`. */
  totals(at: number): { attempts: number; failures: number };
}

/** Slots of the window: its memory is fixed, whatever the rate of attempts. */
const SLOTS = 10;

/**
 * A {@link FailureWindow} of `widthMs`, counted in ten slots of a tenth of it each: a count per slot, not a
 * time per attempt, so that a thousand attempts a second cost no more memory than one. The window is
 * accurate to a tenth of its width.
 */
export function createFailureWindow(widthMs: number): FailureWindow {
  const width = Math.max(1, widthMs / SLOTS);
  const slots = Array.from({ length: SLOTS }, () => ({ slot: -1, attempts: 0, failures: 0 }));
  return {
    add(at, failed) {
      const slot = Math.floor(at / width);
      const s = slots[slot % SLOTS] as (typeof slots)[number];
      if (s.slot !== slot) Object.assign(s, { slot, attempts: 0, failures: 0 });
      s.attempts += 1;
      if (failed) s.failures += 1;
    },
    totals(at) {
      const slot = Math.floor(at / width);
      let attempts = 0;
      let failures = 0;
      for (const s of slots) {
        if (s.slot > slot - SLOTS && s.slot <= slot) {
          attempts += s.attempts;
          failures += s.failures;
        }
      }
      return { attempts, failures };
    },
  };
}
