import type { DurableStore } from '../stores/store.js';
import type { RetentionOptions } from '../config/retention-options.js';
import { PurgeWindowError } from '../shared/errors.js';

/**
 * Refuses (throws {@link PurgeWindowError}) a purge of delivered entries (and of the at-most-once claims
 * purged with them) whose `before` is later than `now - ttlMs`: inside the dedupe window, a resend of one
 * would be delivered, and credited, a second time. `before` at `now - ttlMs` (retention's own purge) or
 * earlier is let through; so is a purge of dead entries, or one the caller asked for explicitly
 * (`insideDedupeWindow`). `anyway` says, in the caller's words, how to ask for it. A `before` that is no
 * date is not refused here: check it first (`checkPurge`), as `ipn.inbox.purge` does.
 */
export function checkPurgeWindow(
  before: unknown,
  status: unknown,
  ttlMs: number,
  insideDedupeWindow: boolean,
  anyway: string,
  now = Date.now(),
): void {
  if (insideDedupeWindow || (status !== undefined && status !== 'delivered')) return;
  if (!(before instanceof Date) || Number.isNaN(before.getTime())) return;
  const start = now - ttlMs;
  if (before.getTime() <= start) return;
  // A window reaching before the first Date (ttlMs up to Number.MAX_SAFE_INTEGER) starts at that Date.
  throw new PurgeWindowError(before, new Date(Math.max(start, -8.64e15)), ttlMs, anyway);
}

/** What one retention pass did: how many entries it deleted, by status, and how many records it blanked. */
export interface RetentionPass {
  delivered: number;
  dead: number;
  redacted: number;
}

/**
 * One retention pass over `inbox` at `now`: the one rule, which every store runs in its own dialect. Deletes
 * delivered entries older than `ttlMs`, dead ones older than `deadMs`, and blanks the customer's data older
 * than `personalDataMs` (a store without `redact` keeps it); an age reaching before 1970 deletes and blanks
 * nothing. Rejects with the first store failure.
 */
export async function retentionPass(
  inbox: DurableStore,
  ttlMs: number,
  retention: RetentionOptions,
  now = Date.now(),
): Promise<RetentionPass> {
  // An age reaching back before 1970 (Infinity, or Number.MAX_SAFE_INTEGER, which the options accept and
  // no Date can hold) covers nothing any inbox holds: that step is skipped, never a TypeError of the store's
  // date check that would stop the rest of the pass (the customer's data would then never be blanked).
  const before = (ms: number): Date | undefined => (now - ms > 0 ? new Date(now - ms) : undefined);
  const [deliveredBefore, deadBefore, personalBefore] = [
    before(ttlMs),
    before(retention.deadMs),
    before(retention.personalDataMs),
  ];
  const delivered = deliveredBefore ? await inbox.purge(deliveredBefore) : 0;
  const dead = deadBefore ? await inbox.purge(deadBefore, 'dead') : 0;
  const redacted =
    personalBefore && typeof inbox.redact === 'function' ? await inbox.redact(personalBefore) : 0;
  return { delivered, dead, redacted };
}
