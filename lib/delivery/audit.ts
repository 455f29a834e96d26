import type { AuditEntry, AuditListOptions, DurableStore } from '../stores/store.js';
import { StoreError, messageOf } from '../shared/errors.js';

/**
 * One operator action to keep: what, who, and what it touched or came to.
 * @inline
 */
export type AuditAction = Omit<AuditEntry, 'at'>;

/** Who an action is recorded as when nobody is named. */
export const UNKNOWN_ACTOR = 'unknown';

/** The longest action name (MySQL's `VARCHAR(64)`) and actor (in characters) the audit trail keeps. */
const MAX_ACTION = 64;
const MAX_ACTOR = 200;
/** Control characters: a NUL PostgreSQL's text refuses, a terminal escape the CLI's output would run. */
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/g;

/** The action's name, checked: a non-empty string of at most 64 characters (a programmer's slip else). */
function actionName(name: unknown): string {
  if (typeof name !== 'string' || name === '' || name.length > MAX_ACTION) {
    const got = typeof name === 'string' ? `${name.length} characters` : typeof name;
    throw new TypeError(`recordAction: action must be a name of 1 to ${MAX_ACTION} characters, got ${got}`);
  }
  return name;
}

/**
 * Who, as every store keeps it alike: without control characters, at most 200 characters (never half of
 * one), `'unknown'` when nothing is left.
 */
function actorOf(actor: unknown): string {
  if (typeof actor !== 'string')
    throw new TypeError(`recordAction: actor must be a string, got ${typeof actor}`);
  const kept = Array.from(actor.replace(CONTROL, '').trim()).slice(0, MAX_ACTOR).join('');
  return kept === '' ? UNKNOWN_ACTOR : kept;
}

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
  const entry = { action: actionName(action.action), actor: actorOf(action.actor), detail: action.detail };
  if (store.audit === undefined) return false;
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
