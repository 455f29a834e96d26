import type { InboxEntry, ListOptions } from '../stores/store.js';
import { delivered, dead, expected, inboxOfFour, take } from './store-conformance-entries.js';
import { keysOf, must, same, type Rule } from './store-conformance-kit.js';
import { replayMatching } from '../delivery/bulk-replay.js';

/** The rules of the operator's tools: replay, purge, the list and the counts. */
export const OPERATOR_RULES: Rule[] = [
  {
    name: 'replay',
    needs: 'durable',
    async run(kit) {
      const key = kit.key('replay');
      await delivered(kit, key);
      must(await kit.store.replay(key), `replay(${key}) of a delivered entry resolved false`);
      const entry = await kit.entry(key);
      same(entry.status, 'received', `status of ${key} after replay`);
      same(entry.attempts, 0, `attempts of ${key} after replay`);
      same((await take(kit, key)).entry.attempts, 1, `attempts of ${key} leased after replay`);
      const later = kit.key('replay-failed');
      await kit.failed(later, 3_600_000);
      must(await kit.store.replay(later), `replay(${later}) of a failed entry resolved false`);
      await take(kit, later); // due now, not in an hour
      const unknown = kit.key('replay-unknown');
      must(!(await kit.store.replay(unknown)), 'replay() of an unknown key resolved true');
      must((await kit.store.get(unknown)) === undefined, 'replay() of an unknown key created it');
      const claimed = kit.key('replay-claimed');
      await kit.store.claim(claimed, kit.longMs, kit.lease().id);
      must(
        !(await kit.store.replay(claimed)),
        'replay() of a key claimed (at most once) but never received resolved true',
      );
    },
  },
  {
    // A bulk replay lists entries, then replays each only if it is still in a status it selected: an entry
    // a retry delivered in between must not be run again (a second credit). The check is in the write.
    name: 'replay-from',
    needs: 'durable',
    async run(kit) {
      const done = kit.key('replay-from-delivered');
      await delivered(kit, done);
      must(
        !(await kit.store.replay(done, 0, ['received', 'failed', 'dead'])),
        `replay(${done}, 0, [received, failed, dead]) of a delivered entry resolved true`,
      );
      same(
        (await kit.entry(done)).status,
        'delivered',
        `status of ${done} after a replay from other statuses`,
      );
      const failed = kit.key('replay-from-failed');
      await kit.failed(failed, 3_600_000);
      must(
        !(await kit.store.replay(failed, 0, ['dead'])),
        `replay(${failed}, 0, [dead]) of a failed entry resolved true`,
      );
      same((await kit.entry(failed)).status, 'failed', `status of ${failed} after a replay from dead only`);
      must(await kit.store.replay(failed, 0, ['failed']), `replay(${failed}, 0, [failed]) resolved false`);
      same((await kit.entry(failed)).status, 'received', `status of ${failed} after a replay from failed`);
    },
  },
  {
    // An operator replays an entry whose attempt is still running: that attempt finishes first, alone.
    name: 'replay-keeps-live-lease',
    needs: 'durable',
    async run(kit) {
      const key = kit.key('replay-leased');
      const lease = kit.lease();
      must(await kit.store.receive(key, kit.record(key), lease), `receive(${key}) resolved false`);
      must(await kit.store.replay(key), `replay(${key}) resolved false`);
      same(
        keysOf(await kit.store.lease(kit.lease(), 100)),
        [],
        `the keys lease() took while ${key}'s lease lives`,
      );
      must(
        await kit.store.settle(key, lease.id, { status: 'delivered' }),
        `the running attempt could not settle ${key} after a replay`,
      );
      // The attempt died instead: once its lease runs out, the replayed entry is taken, as its first attempt.
      const died = kit.key('replay-died');
      must(
        await kit.store.receive(died, kit.record(died), kit.lease(kit.shortMs)),
        `receive(${died}) resolved false`,
      );
      must(await kit.store.replay(died), `replay(${died}) resolved false`);
      const next = kit.lease();
      let entry: InboxEntry | undefined;
      await kit.eventually(
        `lease() taking the replayed ${died} after its ${kit.shortMs} ms lease ran out`,
        async () => {
          entry = (await kit.store.lease(next, 100)).find((taken) => taken.key === died);
          return entry !== undefined;
        },
      );
      same(entry?.attempts, 1, `attempts of ${died} leased after its replay`);
    },
  },
  {
    name: 'replayDead',
    needs: 'durable',
    async run(kit) {
      const [a, b, done, failed] = ['dead', 'dead', 'delivered', 'failed'].map((label) =>
        kit.key(`replay-${label}`),
      );
      await dead(kit, a!);
      await dead(kit, b!);
      await delivered(kit, done!);
      await kit.failed(failed!, 3_600_000);
      same(await kit.store.replayDead(), 2, 'what replayDead() resolved with two dead entries');
      for (const key of [a!, b!]) {
        const entry = await kit.entry(key);
        same(
          [entry.status, entry.attempts],
          ['received', 0],
          `[status, attempts] of ${key} after replayDead`,
        );
      }
      same((await kit.entry(done!)).status, 'delivered', `status of the delivered ${done}`);
      same((await kit.entry(failed!)).status, 'failed', `status of the failed ${failed}`);
      same(
        keysOf(await kit.store.lease(kit.lease(), 100)),
        [a!, b!].sort(),
        'the keys lease() took after replayDead',
      );
      same(await kit.store.replayDead(), 0, 'what a second replayDead() resolved');
    },
  },
  {
    // A bulk replay paces its entries: one made due an hour from now (by the store's clock) is not leased now.
    name: 'replay-delayed',
    needs: 'durable',
    async run(kit) {
      const [now, later] = ['now', 'later'].map((label) => kit.key(`replay-delay-${label}`));
      await dead(kit, now!);
      await dead(kit, later!);
      must(await kit.store.replay(now!, 0), `replay(${now}, 0) resolved false`);
      must(await kit.store.replay(later!, 3_600_000), `replay(${later}, 1 hour) resolved false`);
      const entry = await kit.entry(later!);
      same([entry.status, entry.attempts], ['received', 0], `[status, attempts] of ${later} after replay`);
      must(
        entry.nextAttemptAt.getTime() > entry.updatedAt.getTime() + 30 * 60_000,
        `nextAttemptAt of ${later} replayed an hour ahead: ${entry.nextAttemptAt.toISOString()}`,
      );
      same(
        keysOf(await kit.store.lease(kit.lease(), 100)),
        [now!],
        'the keys lease() took after one replay due now and one due in an hour',
      );
    },
  },
  {
    // ipn.replay()'s filter, as the router runs it over the store's list() and replay(key, delayMs).
    name: 'replay-filtered',
    needs: 'durable',
    async run(kit) {
      const [gone, alsoGone, done, other] = ['a', 'b', 'c', 'd'].map((label) =>
        kit.key(`replay-filter-${label}`),
      );
      await dead(kit, gone!);
      await dead(kit, alsoGone!);
      await delivered(kit, done!);
      await dead(kit, other!);
      const ids = [gone!, alsoGone!, done!].map((key) => key.slice(0, key.lastIndexOf(':')));
      const dry = await replayMatching(kit.store, { status: 'dead', transactionIds: ids, dryRun: true }, 1);
      same(
        dry,
        { matched: 2, replayed: 0, keys: [] },
        'a dry run over two dead entries of three transactions',
      );
      same((await kit.entry(gone!)).status, 'dead', `status of ${gone} after a dry run`);
      const done1 = await replayMatching(kit.store, { status: 'dead', transactionIds: ids }, 1);
      same(
        { ...done1, keys: [...done1.keys].sort() },
        { matched: 2, replayed: 2, keys: [gone!, alsoGone!].sort() },
        'a replay over two dead entries of three transactions',
      );
      same((await kit.entry(done!)).status, 'delivered', `status of the delivered ${done}`);
      same((await kit.entry(other!)).status, 'dead', `status of ${other}, of no transaction named`);
      // At one a second, the first is due now and the second a second later.
      const [first, second] = [await kit.entry(gone!), await kit.entry(alsoGone!)];
      same([first.status, second.status], ['received', 'received'], 'statuses after the replay');
      must(
        Math.abs(second.nextAttemptAt.getTime() - first.nextAttemptAt.getTime()) >= 500,
        `the second entry due a second after the first at replayRate 1 (${first.nextAttemptAt.toISOString()}, ${second.nextAttemptAt.toISOString()})`,
      );
    },
  },
  {
    name: 'purge',
    needs: 'durable',
    async run(kit) {
      const entry = (await inboxOfFour(kit))[1]!;
      const at = entry.deliveredAt!.getTime();
      same(
        await kit.store.purge(new Date(at)),
        0,
        `purge(before: its deliveredAt) of ${entry.key} (strictly before)`,
      );
      same(await kit.store.purge(new Date(at + 3_600_000)), 1, 'purge() of one delivered entry among four');
      must((await kit.store.get(entry.key)) === undefined, `get(${entry.key}) found the purged entry`);
      same((await kit.store.list()).length, 3, 'entries left after the purge (received, failed, dead stay)');
      must(
        await kit.store.receive(entry.key, kit.record(entry.key), kit.lease()),
        `receive(${entry.key}) after its purge resolved false: its resend is new`,
      );
    },
  },
  {
    name: 'list-filters',
    needs: 'durable',
    async run(kit) {
      const entries = await inboxOfFour(kit);
      const third = entries[2]!.receivedAt;
      const cases: ListOptions[] = [
        {},
        { order: 'newest' },
        { status: 'received' },
        { status: 'delivered' },
        { status: 'dead' },
        { status: 'failed' },
        { transactionId: entries[0]!.transactionId },
        { transactionId: entries[0]!.transactionId, status: 'received' },
        { customDataContains: 'order-abc' },
        { customDataContains: 'ORDER' },
        { customDataContains: 'absent' },
        { receivedFrom: third },
        { receivedBefore: third },
        { receivedFrom: entries[1]!.receivedAt, receivedBefore: third },
        { limit: 2 },
        { limit: 2, offset: 1 },
        { offset: 4 },
        { order: 'newest', limit: 1 },
        { order: 'newest', offset: 1, limit: 2 },
      ];
      for (const options of cases) {
        const keys = (await kit.store.list(options)).map((entry) => entry.key);
        same(keys, expected(entries, options), `the keys list(${describe(options)}) answered`);
      }
    },
  },
  {
    name: 'countByStatus',
    needs: 'countByStatus',
    async run(kit) {
      const entries = await inboxOfFour(kit);
      const count = (from?: Date) => {
        const counts = { received: 0, delivered: 0, failed: 0, dead: 0 };
        for (const entry of entries)
          if (from === undefined || entry.receivedAt >= from) counts[entry.status] += 1;
        return counts;
      };
      same(await kit.store.countByStatus!(), count(), 'countByStatus()');
      const from = entries[2]!.receivedAt;
      same(await kit.store.countByStatus!(from), count(from), `countByStatus(${from.toISOString()})`);
    },
  },
];

/** Options as a short text, Dates as ISO. */
function describe(options: ListOptions): string {
  return JSON.stringify(options);
}
