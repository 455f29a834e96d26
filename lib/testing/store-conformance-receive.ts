import { randomUUID } from 'node:crypto';
import { isDate, near } from './store-conformance-entries.js';
import { atOnce, must, same, type Rule } from './store-conformance-kit.js';

/** The rules of a durable store's receive and get: a notification is stored once, whole, leased to its first attempt. */
export const RECEIVE_RULES: Rule[] = [
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
    // A router at most once claims; one at least once receives. Two instances in different modes on one
    // store (a deploy that switches `delivery`) must not both take one notification.
    name: 'claim-receive-exclusive',
    needs: 'durable',
    async run(kit) {
      const claimed = kit.key('claim-receive-exclusive');
      must(
        await kit.store.claim(claimed, kit.longMs, randomUUID()),
        `the first claim of ${claimed} resolved false`,
      );
      must(
        !(await kit.store.receive(claimed, kit.record(claimed), kit.lease())),
        `receive(${claimed}) of a key a live claim holds resolved true: an instance at least once would deliver again what one at most once delivered`,
      );
      const received = kit.key('claim-receive-exclusive');
      must(
        await kit.store.receive(received, kit.record(received), kit.lease()),
        `receive(${received}) resolved false`,
      );
      must(
        !(await kit.store.claim(received, kit.longMs, randomUUID())),
        `claim(${received}) of a received key resolved true: an instance at most once would deliver again what the inbox holds`,
      );
      for (const key of [kit.key('claim-receive-exclusive'), kit.key('claim-receive-exclusive')]) {
        const answers = await atOnce(kit.concurrency, (index) =>
          index % 2 === 0
            ? kit.at(index).claim(key, kit.longMs, randomUUID())
            : kit.at(index).receive(key, kit.record(key), kit.lease()),
        );
        const firsts = answers.filter((answer) => answer === true).length;
        must(
          firsts === 1,
          `${kit.concurrency} claims and receives of ${key} at once: ${firsts} resolved true, expected 1`,
        );
      }
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
];
