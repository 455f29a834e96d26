import type { IpnOutcome } from './ipn-outcome.js';

/**
 * The work after the answer of every request answered so far (the listeners of a notification answered
 * 200, verification, the store's bookkeeping), from the moment its outcome exists until it settles: so that
 * `close()` can wait for it. The service never resends a notification answered 200, so a host that exits
 * once `close()` resolved must not cut a listener short.
 *
 * An outcome is counted as soon as the pipeline made it, not when the transport starts its work: between the
 * two, the answer is being written (behind a host's `onSend` hook on Fastify, for as long as that takes).
 */
export function createAnsweredWork() {
  // A set, not a promise per outcome: every request passes through here, and only close() ever waits.
  const pending = new Set<IpnOutcome>();
  /** What `settled` waits on: woken each time the last outcome's work settles. */
  const idle = new Set<() => void>();

  /** Resolves once no outcome's work is running (at once if none is). */
  const emptied = (): Promise<void> =>
    pending.size === 0 ? Promise.resolve() : new Promise<void>((resolve) => idle.add(resolve));

  return {
    /** Counts `outcome`'s work from now on, until {@link finished} is called for it. */
    started(outcome: IpnOutcome): void {
      if (outcome.after !== undefined) pending.add(outcome);
    },
    /** `outcome`'s work has settled. */
    finished(outcome: IpnOutcome): void {
      if (!pending.delete(outcome) || pending.size > 0 || idle.size === 0) return;
      const waiting = [...idle];
      idle.clear();
      for (const wake of waiting) wake();
    },
    /** How many outcomes' work is still running. */
    get size(): number {
      return pending.size;
    },
    /**
     * Resolves once no work is running and `background` (other work close() waits for, which never rejects)
     * settled, or after `ms` with how many outcomes are still running then (0 when all settled) and whether
     * `background` is. Work counted while it waits is waited for too. Leaves no timer behind.
     */
    async settled(
      ms: number,
      background: Promise<void> = Promise.resolve(),
    ): Promise<{ running: number; background: boolean }> {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const late = new Promise<'late'>((resolve) => {
        timer = setTimeout(() => resolve('late'), ms);
      });
      let backgroundRunning = true;
      void background.then(() => {
        backgroundRunning = false;
      });
      try {
        while (pending.size > 0 || backgroundRunning) {
          const all = Promise.all([emptied(), background]);
          if ((await Promise.race([all, late])) === 'late') break;
        }
        return { running: pending.size, background: backgroundRunning };
      } finally {
        clearTimeout(timer);
      }
    },
  };
}
