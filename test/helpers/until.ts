import { setTimeout as sleep } from 'node:timers/promises';

/**
 * Resolves once `condition()` holds, checking every few milliseconds; rejects after `timeoutMs` with
 * `what` in the message. For outcomes that happen after the answer (events, retries), not for timing.
 */
export async function until(condition: () => boolean, what: string, timeoutMs = 4_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}
