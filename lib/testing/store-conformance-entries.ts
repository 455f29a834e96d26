import type { InboxEntry, ListOptions, Settlement } from '../stores/store.js';
import { must, same, type RuleKit } from './store-conformance-kit.js';

/** How far two times of one store may lie apart and still be "the same" (a store may round to seconds). */
const SLACK_MS = 1000;

export const near = (a: Date | null, b: Date, slack = SLACK_MS): boolean =>
  isDate(a) && Math.abs(a.getTime() - b.getTime()) <= slack;

/**
 * A valid Date, from this realm or another: `instanceof Date` is false under jest for a date a store copied
 * with `structuredClone` (made in Node's realm, not the test's), which is a Date all the same.
 */
export const isDate = (value: unknown): value is Date =>
  Object.prototype.toString.call(value) === '[object Date]' && !Number.isNaN((value as Date).getTime());

/** The three settlements, for rules that try each. */
export function settlements(entry: InboxEntry): Settlement[] {
  return [
    { status: 'delivered' },
    { status: 'failed', error: 'late', nextAttemptAt: new Date(entry.receivedAt.getTime() + 60_000) },
    { status: 'dead', error: 'late' },
  ];
}

/** `entry` must still be as `before` was (the fields a stray write would change). */
export function unchanged(entry: InboxEntry | undefined, before: InboxEntry, what: string): void {
  must(entry !== undefined, `${what} deleted ${before.key}`);
  const fields = ({ status, attempts, lastError, record, deliveredAt }: InboxEntry) => ({
    status,
    attempts,
    lastError,
    record,
    deliveredAt,
  });
  same(fields(entry), fields(before), `${what} changed ${before.key}`);
}

/** Takes `key` with a new lease (long unless `ms`), failing the rule if `lease()` does not return it. */
export async function take(
  kit: RuleKit,
  key: string,
  ms?: number,
): Promise<{ id: string; entry: InboxEntry }> {
  const lease = kit.lease(ms);
  const entry = (await kit.store.lease(lease, 100)).find((taken) => taken.key === key);
  must(entry !== undefined, `lease() did not return ${key}, which is due and not leased`);
  return { id: lease.id, entry };
}

/** Delivers `key` (received, then settled by its receive's lease). */
export async function delivered(kit: RuleKit, key: string, record = kit.record(key)): Promise<InboxEntry> {
  const lease = kit.lease();
  must(await kit.store.receive(key, record, lease), `receive(${key}) resolved false`);
  must(
    await kit.store.settle(key, lease.id, { status: 'delivered' }),
    `settle(${key}, delivered) resolved false`,
  );
  return kit.entry(key);
}

/** Receives `key` and ends its attempt as dead. */
export async function dead(kit: RuleKit, key: string, record = kit.record(key)): Promise<InboxEntry> {
  const lease = kit.lease();
  must(await kit.store.receive(key, record, lease), `receive(${key}) resolved false`);
  must(
    await kit.store.settle(key, lease.id, { status: 'dead', error: 'gave up' }),
    `settle(${key}, dead) resolved false`,
  );
  return kit.entry(key);
}

/**
 * Four entries received one after the other, a pause apart (so that their receipt times differ where the
 * store's clock allows): received, delivered, dead and failed; two of one transaction.
 */
export async function inboxOfFour(kit: RuleKit): Promise<InboxEntry[]> {
  const tx = kit.key('list', 'X').slice(0, -2);
  const keys = [`${tx}:SUCCESSFUL`, `${tx}:FAILED`, kit.key('list'), kit.key('list')];
  const data = ['Order-ABC-1', 'order-xyz', 'ORDER-abc-3', 'nothing'];
  const record = (index: number) => kit.record(keys[index]!, { custom_data: data[index] });
  must(await kit.store.receive(keys[0]!, record(0), kit.lease()), `receive(${keys[0]}) resolved false`);
  await kit.pause(5);
  await delivered(kit, keys[1]!, record(1));
  await kit.pause(5);
  await dead(kit, keys[2]!, record(2));
  await kit.pause(5);
  await kit.failed(keys[3]!, 3_600_000, record(3));
  return Promise.all(keys.map((key) => kit.entry(key)));
}

/** What `list(options)` must answer of `entries` (received oldest first), worked out from their own fields. */
export function expected(entries: InboxEntry[], options: ListOptions): string[] {
  const { status, transactionId, customDataContains, receivedFrom, receivedBefore } = options;
  const { order = 'oldest', limit = 100, offset = 0 } = options;
  const kept = entries.filter(
    (entry) =>
      (status === undefined || entry.status === status) &&
      (transactionId === undefined || entry.transactionId === transactionId) &&
      (customDataContains === undefined ||
        String(entry.record.custom_data).toLowerCase().includes(customDataContains.toLowerCase())) &&
      (receivedFrom === undefined || entry.receivedAt >= receivedFrom) &&
      (receivedBefore === undefined || entry.receivedAt < receivedBefore),
  );
  if (order === 'newest') kept.reverse();
  return kept.slice(offset, offset + limit).map((entry) => entry.key);
}
