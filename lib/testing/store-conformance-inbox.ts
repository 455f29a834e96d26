import { randomUUID } from 'node:crypto';
import type { InboxEntry, Settlement } from '../stores/store.js';
import { atOnce, keysOf, must, same, type Rule, type RuleKit } from './store-conformance-kit.js';

/** How far two times of one store may lie apart and still be "the same" (a store may round to seconds). */
const SLACK_MS = 1000;

const near = (a: Date | null, b: Date, slack = SLACK_MS): boolean =>
  a instanceof Date && Math.abs(a.getTime() - b.getTime()) <= slack;

const isDate = (value: unknown): value is Date => value instanceof Date && !Number.isNaN(value.getTime());

/** The three settlements, for rules that try each. */
function settlements(entry: InboxEntry): Settlement[] {
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

/** The rules of a durable store's receive, get, lease and settle: the at-least-once delivery loop. */
export const INBOX_RULES: Rule[] = [
  {
    name: 'receive-once',
    needs: 'durable',
    async run(kit) {
      const key = kit.key('receive-once');
      const first = kit.record(key, { custom_data: 'first' });
      const [a, b] = [kit.lease(), kit.lease()];
      must(await kit.store.receive(key, first, a), `receive(${key}) of a new key resolved false`);
      must(
        !(await kit.store.receive(key, kit.record(key, { custom_data: 'second' }), b)),
        `a second receive(${key}) (a resend) resolved true`,
      );
      same((await kit.entry(key)).record, first, `the record of ${key} after a resend`);
      must(
        !(await kit.store.settle(key, b.id, { status: 'delivered' })),
        `the resend's lease settled ${key}`,
      );
      must(
        await kit.store.settle(key, a.id, { status: 'delivered' }),
        `the first receive's lease did not settle ${key}`,
      );
    },
  },
  {
    name: 'receive-concurrent',
    needs: 'durable',
    async run(kit) {
      for (const key of [kit.key('receive-concurrent'), kit.key('receive-concurrent')]) {
        const leases = Array.from({ length: kit.concurrency }, () => kit.lease());
        const records = leases.map((_, index) => kit.record(key, { custom_data: `copy-${index}` }));
        const answers = await atOnce(kit.concurrency, (index) =>
          kit.at(index).receive(key, records[index]!, leases[index]!),
        );
        const winners = answers.flatMap((answer, index) => (answer === true ? [index] : []));
        must(
          winners.length === 1,
          `${kit.concurrency} concurrent receives of ${key}: ${winners.length} resolved true, expected exactly 1`,
        );
        const winner = winners[0]!;
        const entry = await kit.entry(key);
        same(entry.record, records[winner], `the record of ${key} (the one receive that resolved true)`);
        same(entry.attempts, 1, `attempts of ${key}`);
        const loser = leases[(winner + 1) % leases.length]!;
        must(
          !(await kit.store.settle(key, loser.id, { status: 'delivered' })),
          `the lease of a receive that resolved false settled ${key}`,
        );
        must(
          await kit.store.settle(key, leases[winner]!.id, { status: 'delivered' }),
          `the lease of the receive that resolved true did not settle ${key}`,
        );
      }
    },
  },
  {
    name: 'get',
    needs: 'durable',
    async run(kit) {
      must(
        (await kit.store.get(kit.key('get-unknown'))) === undefined,
        'get() of an unknown key was not undefined',
      );
      // A transaction id may hold a ':': the state is what follows the last one.
      const key = kit.key('get:with-colon', 'FAILED');
      const record = kit.record(key, { nested: { list: [1, 'two', null], flag: true }, text: 'é ✓' });
      const original = JSON.parse(JSON.stringify(record)) as Record<string, unknown>;
      const lease = kit.lease();
      must(await kit.store.receive(key, record, lease), `receive(${key}) resolved false`);
      record.custom_data = 'changed by the caller after receive';
      const entry = await kit.entry(key);
      const { receivedAt, updatedAt, nextAttemptAt, leaseUntil, deliveredAt } = entry;
      same(entry.key, key, 'key');
      same(entry.transactionId, key.slice(0, key.lastIndexOf(':')), `transactionId of ${key}`);
      same(entry.state, 'FAILED', `state of ${key}`);
      same(entry.record, original, `record of ${key}`);
      same(entry.status, 'received', `status of ${key}`);
      same(entry.attempts, 1, `attempts of ${key} (a receive starts the first attempt)`);
      same(entry.lastError, null, `lastError of ${key}`);
      same(deliveredAt, null, `deliveredAt of ${key}`);
      for (const [name, value] of Object.entries({ receivedAt, updatedAt, nextAttemptAt, leaseUntil }))
        must(isDate(value), `${name} of ${key} is not a valid Date: ${String(value)}`);
      must(
        near(leaseUntil, new Date(receivedAt.getTime() + lease.ms), 5000),
        `leaseUntil of ${key} is ${leaseUntil?.toISOString()}, not about receivedAt + lease.ms`,
      );
      entry.record.amount = -1;
      same(
        (await kit.entry(key)).record.amount,
        1500,
        `the record of ${key} after the caller changed a copy`,
      );
    },
  },
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
  {
    name: 'settle-delivered',
    needs: 'durable',
    async run(kit) {
      const key = kit.key('settle-delivered');
      const lease = kit.lease();
      must(await kit.store.receive(key, kit.record(key), lease), `receive(${key}) resolved false`);
      must(
        await kit.store.settle(key, lease.id, { status: 'delivered' }),
        `settle(${key}, delivered) resolved false`,
      );
      const entry = await kit.entry(key);
      same(entry.status, 'delivered', `status of ${key}`);
      must(isDate(entry.deliveredAt), `deliveredAt of ${key} is not a Date: ${String(entry.deliveredAt)}`);
      same(entry.leaseUntil, null, `leaseUntil of ${key} once settled`);
      same(
        keysOf(await kit.store.lease(kit.lease(), 100)),
        [],
        'the keys lease() took (only a delivered entry)',
      );
      must(
        !(await kit.store.settle(key, lease.id, { status: 'failed', error: 'x', nextAttemptAt: new Date() })),
        `a second settle(${key}) by the ended attempt's lease resolved true`,
      );
      must(
        !(await kit.store.receive(key, kit.record(key), kit.lease())),
        `receive(${key}) of a delivered key resolved true`,
      );
    },
  },
  {
    name: 'settle-failed',
    needs: 'durable',
    async run(kit) {
      const key = kit.key('settle-failed');
      const lease = kit.lease();
      must(await kit.store.receive(key, kit.record(key), lease), `receive(${key}) resolved false`);
      const { receivedAt } = await kit.entry(key);
      const nextAttemptAt = new Date(receivedAt.getTime() + 3_600_000);
      const settled = await kit.store.settle(key, lease.id, {
        status: 'failed',
        error: 'the ledger is down',
        nextAttemptAt,
      });
      must(settled, `settle(${key}, failed) resolved false`);
      const entry = await kit.entry(key);
      same(entry.status, 'failed', `status of ${key}`);
      same(entry.lastError, 'the ledger is down', `lastError of ${key}`);
      same(entry.attempts, 1, `attempts of ${key}`);
      same(entry.leaseUntil, null, `leaseUntil of ${key} once settled`);
      must(
        near(entry.nextAttemptAt, nextAttemptAt),
        `nextAttemptAt of ${key} is ${entry.nextAttemptAt.toISOString()}, not the ${nextAttemptAt.toISOString()} settle gave`,
      );
    },
  },
  {
    name: 'failed-due-later',
    needs: 'durable',
    async run(kit) {
      const later = kit.key('failed-later');
      await kit.failed(later, 3_600_000);
      const now = kit.key('failed-now');
      await kit.failed(now, -1000);
      same(
        keysOf(await kit.store.lease(kit.lease(), 100)),
        [now],
        'the keys lease() took (one failed entry due in an hour, one due already)',
      );
    },
  },
  {
    name: 'settle-dead',
    needs: 'durable',
    async run(kit) {
      const key = kit.key('settle-dead');
      const lease = kit.lease();
      must(await kit.store.receive(key, kit.record(key), lease), `receive(${key}) resolved false`);
      must(
        await kit.store.settle(key, lease.id, { status: 'dead', error: 'gave up' }),
        `settle(${key}, dead) resolved false`,
      );
      const entry = await kit.entry(key);
      same(entry.status, 'dead', `status of ${key}`);
      same(entry.lastError, 'gave up', `lastError of ${key}`);
      same(entry.leaseUntil, null, `leaseUntil of ${key} once settled`);
      same(keysOf(await kit.store.lease(kit.lease(), 100)), [], 'the keys lease() took (only a dead entry)');
    },
  },
  {
    // An attempt's end may be sent more than once at once, with different outcomes (a timeout's failure
    // racing the listener's answer): exactly one of them ends it, and the entry says which. A read of the
    // lease, then a write, lets several through. (The same settlement sent twice may answer true twice, as
    // the same claim does: it is one outcome.)
    name: 'settle-once',
    needs: 'durable',
    async run(kit) {
      const key = kit.key('settle-once');
      const lease = kit.lease();
      must(await kit.store.receive(key, kit.record(key), lease), `receive(${key}) resolved false`);
      const { receivedAt } = await kit.entry(key);
      const nextAttemptAt = new Date(receivedAt.getTime() + 60_000);
      const outcomes: Settlement[] = Array.from({ length: kit.concurrency }, (_, index) =>
        index === 0
          ? { status: 'delivered' }
          : index % 2 === 1
            ? { status: 'failed', error: `failed ${index}`, nextAttemptAt }
            : { status: 'dead', error: `dead ${index}` },
      );
      const answers = await atOnce(outcomes.length, (index) =>
        kit.at(index).settle(key, lease.id, outcomes[index]!),
      );
      const won = outcomes.filter((_, index) => answers[index] === true);
      must(
        won.length === 1,
        `${outcomes.length} concurrent settles of ${key} by its lease, each another outcome: ${won.length} resolved true, expected exactly 1`,
      );
      const { status, lastError } = await kit.entry(key);
      const winner = won[0]!;
      same(
        { status, lastError: status === 'delivered' ? null : lastError },
        { status: winner.status, lastError: winner.status === 'delivered' ? null : winner.error },
        `status and lastError of ${key} (the one settle that resolved true)`,
      );
    },
  },
  {
    name: 'settle-lease-guarded',
    needs: 'durable',
    async run(kit) {
      const key = kit.key('settle-guarded');
      const lease = kit.lease();
      must(await kit.store.receive(key, kit.record(key), lease), `receive(${key}) resolved false`);
      const before = await kit.entry(key);
      for (const settlement of settlements(before)) {
        const answer = await kit.store.settle(key, randomUUID(), settlement);
        must(!answer, `settle(${key}, ${settlement.status}) by a lease that never held it resolved true`);
        unchanged(
          await kit.store.get(key),
          before,
          `settle(${settlement.status}) by a lease that never held it`,
        );
      }
      must(
        !(await kit.store.settle(kit.key('settle-unknown'), lease.id, { status: 'delivered' })),
        'settle() of an unknown key resolved true',
      );
      must(
        await kit.store.settle(key, lease.id, { status: 'delivered' }),
        `the holding lease did not settle ${key}`,
      );
      // Settled, the entry is held by no lease: no id settles it, not even an empty one.
      const settled = await kit.entry(key);
      for (const id of [lease.id, '']) {
        const answer = await kit.store.settle(key, id, { status: 'dead', error: 'late' });
        must(
          !answer,
          `settle(${key}, dead) by ${id === '' ? 'an empty lease id' : 'its ended lease'} resolved true once it was delivered`,
        );
        unchanged(await kit.store.get(key), settled, 'a settle of a delivered entry');
      }
    },
  },
  {
    name: 'release-lease-guarded',
    needs: 'durable',
    async run(kit) {
      const key = kit.key('release-guarded');
      const lease = kit.lease();
      must(await kit.store.receive(key, kit.record(key), lease), `receive(${key}) resolved false`);
      const before = await kit.entry(key);
      for (const id of [randomUUID(), '']) {
        await kit.store.release(key, id);
        unchanged(
          await kit.store.get(key),
          before,
          `release() with ${id === '' ? 'an empty lease id' : 'a lease that never held it'}`,
        );
      }
      const settled = kit.key('release-settled');
      const ended = kit.lease();
      must(
        await kit.store.receive(settled, kit.record(settled), ended),
        `receive(${settled}) resolved false`,
      );
      must(
        await kit.store.settle(settled, ended.id, { status: 'delivered' }),
        `settle(${settled}) resolved false`,
      );
      for (const id of [ended.id, '']) {
        await kit.store.release(settled, id);
        must(
          (await kit.store.get(settled)) !== undefined,
          `release(${settled}, ${JSON.stringify(id)}) deleted the delivered entry no lease holds`,
        );
      }
      await kit.store.release(key, lease.id);
      must((await kit.store.get(key)) === undefined, `release(${key}) by its holding lease left the entry`);
      must(
        await kit.store.receive(key, kit.record(key), kit.lease()),
        `receive(${key}) after its release resolved false`,
      );
    },
  },
];
