import type { InboxEntry } from '../stores/store.js';
import { isDate, take } from './store-conformance-entries.js';
import { atOnce, keysOf, must, same, type Rule } from './store-conformance-kit.js';

/** The rules of a durable store's lease: due entries are taken by one attempt at a time, and counted. */
export const LEASE_RULES: Rule[] = [
  {
    name: 'lease-exclusive',
    needs: 'durable',
    async run(kit) {
      const held = kit.key('lease-exclusive');
      must(await kit.store.receive(held, kit.record(held), kit.lease()), `receive(${held}) resolved false`);
      const due = kit.key('lease-exclusive');
      await kit.failed(due, -1000);
      const first = await kit.store.lease(kit.lease(), 100);
      same(
        keysOf(first),
        [due],
        'the keys a lease() took (the received entry is still leased by its receive)',
      );
      const second = await kit.store.lease(kit.lease(), 100);
      same(keysOf(second), [], 'the keys a second lease() took while the first lease holds them');
    },
  },
  {
    name: 'lease-counts-attempt',
    needs: 'durable',
    async run(kit) {
      const key = kit.key('lease-counts');
      await kit.failed(key, -1000);
      const { id, entry } = await take(kit, key);
      same(entry.attempts, 2, `attempts of ${key} as lease() returned it (received once, leased once)`);
      must(isDate(entry.leaseUntil), `leaseUntil of ${key} as lease() returned it is not a Date`);
      same((await kit.entry(key)).attempts, 2, `attempts of ${key} in get() after a lease`);
      const again = new Date(entry.receivedAt.getTime() - 1000);
      must(
        await kit.store.settle(key, id, { status: 'failed', error: 'boom', nextAttemptAt: again }),
        'settle resolved false',
      );
      same((await take(kit, key)).entry.attempts, 3, `attempts of ${key} after a second lease`);
    },
  },
  {
    name: 'lease-limit',
    needs: 'durable',
    async run(kit) {
      const keys = [];
      for (let index = 0; index < 5; index += 1) keys.push(kit.key('lease-limit'));
      for (const key of keys) await kit.failed(key, -1000);
      same(await kit.store.lease(kit.lease(), 0), [], 'lease() with limit 0');
      const two = await kit.store.lease(kit.lease(), 2);
      same(two.length, 2, 'how many entries lease(lease, 2) took of 5 due');
      const rest = await kit.store.lease(kit.lease(), 10);
      same(keysOf([...two, ...rest]), [...keys].sort(), 'the keys two leases took together');
    },
  },
  {
    // Instances lease at the same time: each entry goes to one of them.
    name: 'lease-disjoint',
    needs: 'durable',
    async run(kit) {
      const keys = Array.from({ length: 20 }, () => kit.key('lease-disjoint'));
      for (const key of keys) await kit.failed(key, -1000);
      const leases = Array.from({ length: Math.min(kit.concurrency, 10) }, () => kit.lease());
      const taken = await atOnce(leases.length, (index) => kit.at(index).lease(leases[index]!, 3));
      const rest = kit.lease();
      const all = [...taken.flat(), ...(await kit.store.lease(rest, 100))];
      const twice = keysOf(all).filter((key, index, sorted) => sorted[index - 1] === key);
      must(
        twice.length === 0,
        `concurrent lease() calls returned the same entries: ${[...new Set(twice)].join(', ')}`,
      );
      same(keysOf(all), [...keys].sort(), 'the keys concurrent leases took, then one more');
      // Each entry is held by the lease that returned it.
      const holders = [...leases, rest];
      const answers = await Promise.all(
        [...taken, all.slice(taken.flat().length)].flatMap((entries, index) =>
          entries.map((entry) => kit.store.settle(entry.key, holders[index]!.id, { status: 'delivered' })),
        ),
      );
      must(answers.every(Boolean), 'an entry could not be settled by the lease that returned it');
    },
  },
  {
    name: 'lease-expiry',
    needs: 'durable',
    async run(kit) {
      const key = kit.key('lease-expiry');
      await kit.failed(key, -1000);
      const first = await take(kit, key, kit.shortMs);
      let second: InboxEntry | undefined;
      const lease = kit.lease();
      await kit.eventually(
        `lease() taking ${key} again after its ${kit.shortMs} ms lease ran out`,
        async () => {
          second = (await kit.store.lease(lease, 100)).find((entry) => entry.key === key);
          return second !== undefined;
        },
      );
      same(second?.attempts, 3, `attempts of ${key} (received, then leased twice)`);
      must(
        !(await kit.store.settle(key, first.id, { status: 'delivered' })),
        `the expired lease settled ${key} after another lease took it`,
      );
      must(
        await kit.store.settle(key, lease.id, { status: 'delivered' }),
        `the new lease did not settle ${key}`,
      );
    },
  },
];
