import type { InboxEntry } from '../stores/store.js';
import { take, unchanged } from './store-conformance-entries.js';
import { must, same, type Rule, type RuleKit } from './store-conformance-kit.js';

/** Waits until `lease()` takes `key` again (its lease ran out), with a new long lease. */
async function retaken(kit: RuleKit, key: string, why: string): Promise<{ id: string; entry: InboxEntry }> {
  const lease = kit.lease();
  let entry: InboxEntry | undefined;
  await kit.eventually(`lease() taking ${key} again ${why}`, async () => {
    entry = (await kit.at(1).lease(lease, 100)).find((taken) => taken.key === key);
    return entry !== undefined;
  });
  return { id: lease.id, entry: entry! };
}

/**
 * What a crash between two calls can leave. An instance can die after any call: the entry must then be
 * delivered by another instance once the lease runs out, and the dead instance's late calls (a process
 * that was only frozen, a request that arrives after its timeout) must change nothing.
 */
export const CRASH_RULES: Rule[] = [
  {
    // The 200 was sent (the entry is stored) and the instance died before settling.
    name: 'crash-after-receive',
    needs: 'durable',
    async run(kit) {
      const key = kit.key('crash-receive');
      const record = kit.record(key);
      const lost = kit.lease(kit.shortMs);
      must(await kit.store.receive(key, record, lost), `receive(${key}) resolved false`);
      const { id, entry } = await retaken(
        kit,
        key,
        `after the instance that received it died (lease ${kit.shortMs} ms)`,
      );
      same(entry.attempts, 2, `attempts of ${key} (the dead instance's attempt counts)`);
      same(entry.record, record, `record of ${key} as lease() returned it`);
      must(await kit.store.settle(key, id, { status: 'delivered' }), `the new lease did not settle ${key}`);
    },
  },
  {
    // The instance leased the entry, then died (or froze) past its lease; another took it. Whatever the
    // first one sends late changes nothing.
    name: 'crash-lost-lease-changes-nothing',
    needs: 'durable',
    async run(kit) {
      const key = kit.key('crash-lost-lease');
      await kit.failed(key, -1000, kit.record(key, { custom_data: 'first' }));
      const lost = await take(kit, key, kit.shortMs);
      const current = await retaken(kit, key, `after its ${kit.shortMs} ms lease ran out`);
      const before = await kit.entry(key);
      const late = [
        { status: 'delivered' as const },
        {
          status: 'failed' as const,
          error: 'late',
          nextAttemptAt: new Date(before.receivedAt.getTime() + 60_000),
        },
        { status: 'dead' as const, error: 'late' },
      ];
      for (const settlement of late) {
        must(
          !(await kit.store.settle(key, lost.id, settlement)),
          `a late settle(${key}, ${settlement.status}) by the lost lease resolved true`,
        );
        unchanged(await kit.store.get(key), before, `a late settle(${settlement.status}) by the lost lease`);
      }
      await kit.store.release(key, lost.id);
      unchanged(await kit.store.get(key), before, 'a late release() by the lost lease');
      const replaced = await kit.store.replace(
        key,
        lost.id,
        kit.record(key, { custom_data: 'late' }),
        kit.lease(),
      );
      must(!replaced, `a late replace(${key}) by the lost lease resolved true`);
      unchanged(await kit.store.get(key), before, 'a late replace() by the lost lease');
      must(
        await kit.store.settle(key, current.id, { status: 'delivered' }),
        `the current lease did not settle ${key}`,
      );
    },
  },
  {
    // The instance died between taking the entry and replacing a forged record: the forged one is still
    // there (never nothing), and is delivered again, to be checked and replaced by the next attempt.
    name: 'crash-before-replace',
    needs: 'durable',
    async run(kit) {
      const key = kit.key('crash-replace');
      const forged = kit.record(key, { custom_data: 'forged' });
      await kit.failed(key, -1000, forged);
      await take(kit, key, kit.shortMs);
      const next = await retaken(kit, key, `after the instance replacing it died (lease ${kit.shortMs} ms)`);
      same(next.entry.record, forged, `record of ${key} after the crash`);
      const genuine = kit.record(key, { custom_data: 'genuine' });
      const lease = kit.lease();
      must(
        await kit.store.replace(key, next.id, genuine, lease),
        `replace(${key}) by the new lease resolved false`,
      );
      same((await kit.entry(key)).record, genuine, `record of ${key} after the new attempt's replace`);
      must(
        await kit.store.settle(key, lease.id, { status: 'delivered' }),
        `the replacing lease did not settle ${key}`,
      );
    },
  },
];
