import type { DurableStore } from '../stores/store.js';
import type { RetentionOptions } from '../config/retention-options.js';

/** What one retention pass did: how many entries it deleted, by status, and how many records it blanked. */
export interface RetentionPass {
  delivered: number;
  dead: number;
  redacted: number;
}

/**
 * One retention pass over `inbox` at `now`: the one rule, which every store runs in its own dialect. Deletes
 * delivered entries older than `ttlMs`, dead ones older than `deadMs`, and blanks the customer's data older
 * than `personalDataMs` (a store without `redact` keeps it). Rejects with the first store failure.
 */
export async function retentionPass(
  inbox: DurableStore,
  ttlMs: number,
  retention: RetentionOptions,
  now = Date.now(),
): Promise<RetentionPass> {
  const before = (ms: number): Date => new Date(now - ms);
  const delivered = await inbox.purge(before(ttlMs));
  const dead = Number.isFinite(retention.deadMs) ? await inbox.purge(before(retention.deadMs), 'dead') : 0;
  const redacted =
    Number.isFinite(retention.personalDataMs) && typeof inbox.redact === 'function'
      ? await inbox.redact(before(retention.personalDataMs))
      : 0;
  return { delivered, dead, redacted };
}
