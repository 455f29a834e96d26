import type { InboxEntry, ListOptions } from '../stores/store.js';
import { take } from './store-conformance-inbox.js';
import { atOnce, keysOf, must, same, type Rule, type RuleKit } from './store-conformance-kit.js';

/** Delivers `key` (received, then settled by its receive's lease). */
async function delivered(kit: RuleKit, key: string, record = kit.record(key)): Promise<InboxEntry> {
  const lease = kit.lease();
  must(await kit.store.receive(key, record, lease), `receive(${key}) resolved false`);
  must(
    await kit.store.settle(key, lease.id, { status: 'delivered' }),
    `settle(${key}, delivered) resolved false`,
  );
  return kit.entry(key);
}

/** Receives `key` and ends its attempt as dead. */
async function dead(kit: RuleKit, key: string, record = kit.record(key)): Promise<InboxEntry> {
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
async function inboxOfFour(kit: RuleKit): Promise<InboxEntry[]> {
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
function expected(entries: InboxEntry[], options: ListOptions): string[] {
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

/** The rules of a durable store's replace, replay and purge, and of the operator's list and counts. */
export const OPERATOR_RULES: Rule[] = [
  {
    // The record the service contradicted is replaced by the service's own: one atomic step.
    name: 'replace-atomic',
    needs: 'durable',
    async run(kit) {
      const key = kit.key('replace');
      await kit.failed(key, -1000, kit.record(key, { custom_data: 'forged' }));
      const held = await take(kit, key);
      const genuine = kit.record(key, { custom_data: 'genuine', amount: 2500 });
      const next = kit.lease();
      const replacing = kit.store.replace(key, held.id, genuine, next);
      // Read while it runs: the entry is the forged record or the genuine one, never absent.
      let done = false;
      const settled = replacing.finally(() => (done = true));
      const reads: Array<Promise<InboxEntry | undefined>> = [];
      for (let index = 0; index < 200 && (index < 20 || !done); index += 1) {
        reads.push(kit.store.get(key));
        if (index % 20 === 19) await new Promise((resolve) => setImmediate(resolve));
      }
      must(await settled, `replace(${key}) by its holding lease resolved false`);
      const absent = (await Promise.all(reads)).filter((entry) => entry === undefined).length;
      must(
        absent === 0,
        `get(${key}) found no entry ${absent} times while replace() ran: it must never pass through absent`,
      );
      const entry = await kit.entry(key);
      same(entry.record, genuine, `the record of ${key} after replace`);
      same(entry.status, 'received', `status of ${key} after replace`);
      same(entry.attempts, 1, `attempts of ${key} after replace`);
      same(entry.lastError, null, `lastError of ${key} after replace`);
      must(
        !(await kit.store.settle(key, held.id, { status: 'delivered' })),
        `the replaced lease settled ${key}`,
      );
      must(
        await kit.store.settle(key, next.id, { status: 'delivered' }),
        `the lease replace() gave did not settle ${key}`,
      );
      // Replaces sent twice at once by one attempt: one of them takes the entry.
      const twice = kit.key('replace-twice');
      await kit.failed(twice, -1000);
      const holder = await take(kit, twice);
      const leases = Array.from({ length: kit.concurrency }, () => kit.lease());
      const records = leases.map((_, index) => kit.record(twice, { custom_data: `copy-${index}` }));
      const answers = await atOnce(leases.length, (index) =>
        kit.at(index).replace(twice, holder.id, records[index]!, leases[index]!),
      );
      const winners = answers.flatMap((answer, index) => (answer ? [index] : []));
      must(
        winners.length === 1,
        `${leases.length} concurrent replace(${twice}) by its one lease: ${winners.length} resolved true, expected exactly 1`,
      );
      same(
        (await kit.entry(twice)).record,
        records[winners[0]!],
        `record of ${twice} (the one replace that resolved true)`,
      );
      must(
        await kit.store.settle(twice, leases[winners[0]!]!.id, { status: 'delivered' }),
        `the winning replace's lease did not settle ${twice}`,
      );
    },
  },
  {
    name: 'replace-lease-guarded',
    needs: 'durable',
    async run(kit) {
      const key = kit.key('replace-guarded');
      const lease = kit.lease();
      const forged = kit.record(key, { custom_data: 'forged' });
      must(await kit.store.receive(key, forged, lease), `receive(${key}) resolved false`);
      const other = kit.lease();
      must(
        !(await kit.store.replace(key, kit.lease().id, kit.record(key), other)),
        `replace(${key}) by a lease that never held it resolved true`,
      );
      same((await kit.entry(key)).record, forged, `the record of ${key} after a refused replace`);
      must(
        !(await kit.store.settle(key, other.id, { status: 'delivered' })),
        `a refused replace's lease settled ${key}`,
      );
      const missing = kit.key('replace-missing');
      must(
        !(await kit.store.replace(missing, lease.id, kit.record(missing), kit.lease())),
        'replace() of an unknown key resolved true',
      );
      must((await kit.store.get(missing)) === undefined, 'replace() of an unknown key created it');
      must(
        await kit.store.settle(key, lease.id, { status: 'delivered' }),
        `the holding lease did not settle ${key}`,
      );
    },
  },
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
