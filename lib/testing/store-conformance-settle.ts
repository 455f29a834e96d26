import { randomUUID } from 'node:crypto';
import type { Settlement } from '../stores/store.js';
import { isDate, near, settlements, unchanged } from './store-conformance-entries.js';
import { atOnce, keysOf, must, same, type Rule } from './store-conformance-kit.js';

/** The rules of a durable store's settle and release: an attempt ends once, and only by its lease. */
export const SETTLE_RULES: Rule[] = [
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
