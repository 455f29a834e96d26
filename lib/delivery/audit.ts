import type { AuditEntry, AuditListOptions, DurableStore } from '../stores/store.js';
import { StoreError, messageOf } from '../shared/errors.js';

/**
 * One operator action to keep: what, who, and what it touched or came to.
 * @inline
 */
export type AuditAction = Omit<AuditEntry, 'at'>;

/** Who an action is recorded as when nobody is named. */
export const UNKNOWN_ACTOR = 'unknown';

/**
 * Keeps one operator action (replay, purge, pause, ...) in the store's audit log, with who and what; the
 * store stamps when. Resolves `false` when the store keeps no audit log (a custom store without `audit`):
 * the caller logs the action instead. Rejects with a `StoreError` when the store failed: the action itself
 * is done by then, so the caller says that it was not recorded.
 *
 * @example
 * await ipnAction(); // the replay, the purge...
 * await recordAction(store, { action: 'pause', actor: 'ada', detail: {} });
 */
export async function recordAction(store: DurableStore, action: AuditAction): Promise<boolean> {
  if (store.audit === undefined) return false;
  const entry = {
    action: action.action,
    actor: action.actor.trim() === '' ? UNKNOWN_ACTOR : action.actor.slice(0, 200),
    detail: action.detail,
  };
  try {
    await store.audit.record(entry);
    return true;
  } catch (cause) {
    const message = `the store failed to record the operator's ${entry.action} in the audit log: ${messageOf(cause)}`;
    throw new StoreError(message, { cause });
  }
}

/** The actions the store's audit log keeps, newest first; `[]` when it keeps none. */
export async function listActions(store: DurableStore, options?: AuditListOptions): Promise<AuditEntry[]> {
  return store.audit === undefined ? [] : store.audit.list(options);
}

/** Past this many items, an array in an action's detail is shown as its length (a bulk replay's keys). */
const SHOWN_ITEMS = 10;

/** An action's detail as one line of JSON for people: long arrays (a bulk replay's keys) as their length. */
export function detailText(detail: Record<string, unknown>): string {
  return JSON.stringify(detail, (_name, value: unknown) =>
    Array.isArray(value) && value.length > SHOWN_ITEMS ? `[${value.length} items]` : value,
  );
}
