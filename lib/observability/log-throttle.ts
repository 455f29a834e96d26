/** What {@link createLogThrottle} needs: how often a line may be written, and the clock to tell. */
export interface LogThrottleOptions {
  /** At most one line per this many ms; the first is written at once. */
  everyMs: number;
  /** The clock, in ms (default `Date.now`); a test passes its own. */
  now?: () => number;
}

/** Decides when a repeated log line may be written again, and counts what happened in between. */
export interface LogThrottle {
  /**
   * Counts one occurrence. Answers how many occurred since the last line, this one included, when a line
   * is due now (the caller writes it, with that count); `undefined` while lines are held back, the
   * occurrence then being counted in the next line.
   */
  note(): number | undefined;
}

/**
 * One loud line at the first occurrence, then at most one every `everyMs`: a flood (forged notifications, a
 * wrong secret, an unreachable store) must be seen at once, but must not drown the log or cost a line per
 * request. Nothing is lost: the next line carries how many occurred while lines were held back.
 */
export function createLogThrottle({ everyMs, now = Date.now }: LogThrottleOptions): LogThrottle {
  let loggedAt: number | undefined;
  let occurred = 0;
  return {
    note(): number | undefined {
      occurred += 1;
      const at = now();
      if (loggedAt !== undefined && at - loggedAt < everyMs) return undefined;
      loggedAt = at;
      const count = occurred;
      occurred = 0;
      return count;
    },
  };
}
