import type { InboxEntry } from '../stores/store.js';
import { dead, delivered, take } from './store-conformance-entries.js';
import { atOnce, must, same, type Rule } from './store-conformance-kit.js';

/**
 * The rules of a durable store's replace: the service's record takes the place of a contradicted one,
 * atomically; and, for a store with `replayWith`, of a kept one, made due in the same write.
 */
export const REPLACE_RULES: Rule[] = [
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
      settled.catch(() => undefined); // awaited below; a rejection is the rule's failure, never unhandled
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
    // A forged copy kept (failed, never due) under a genuine payment's key: the service's record takes its
    // place and is made due in one write, only while the copy is still kept and no attempt holds it; two
    // instances at once, one write wins (the genuine payment is credited once).
    name: 'replay-with',
    needs: 'replayWith',
    async run(kit) {
      const replayWith = kit.store.replayWith!.bind(kit.store);
      const century = 100 * 365 * 24 * 3_600_000;
      const key = kit.key('replay-with');
      await kit.failed(key, century, kit.record(key, { custom_data: 'forged', amount: 1 }));
      const genuine = kit.record(key, { custom_data: 'genuine', amount: 2500 });
      must(
        await replayWith(key, genuine, ['failed']),
        `replayWith(${key}, [failed]) of a kept entry resolved false`,
      );
      const entry = await kit.entry(key);
      same(entry.record, genuine, `the record of ${key} after replayWith`);
      same(entry.status, 'received', `status of ${key} after replayWith`);
      same(entry.attempts, 0, `attempts of ${key} after replayWith`);
      // What an operator's search by custom_data finds (a column or an index of it, where the store has one).
      const found = async (text: string) =>
        (await kit.store.list({ customDataContains: text })).some((listed) => listed.key === key);
      must(await found('genuine'), `list({ customDataContains }) does not find ${key} by its new record`);
      must(!(await found('forged')), `list({ customDataContains }) finds ${key} by the record it replaced`);
      const taken = await take(kit, key); // due now, not in a century
      same(taken.entry.record, genuine, `the record lease() gave of ${key} after replayWith`);
      must(
        !(await replayWith(key, kit.record(key), ['failed', 'received'])),
        `replayWith(${key}) while a lease holds it resolved true: the attempt's record was changed under it`,
      );
      same(
        (await kit.entry(key)).record,
        genuine,
        `the record of ${key} after a replayWith refused by its lease`,
      );
      must(
        await kit.store.settle(key, taken.id, { status: 'delivered' }),
        `the lease taken after replayWith did not settle ${key}`,
      );
      // Only from the statuses given, checked in the write: a delivered entry keeps its record.
      const done = kit.key('replay-with-delivered');
      const record = (await delivered(kit, done)).record;
      must(
        !(await replayWith(done, kit.record(done, { amount: 1 }), ['failed'])),
        `replayWith(${done}, [failed]) of a delivered entry resolved true`,
      );
      same((await kit.entry(done)).status, 'delivered', `status of ${done} after a replayWith from failed`);
      same((await kit.entry(done)).record, record, `the record of ${done} after a refused replayWith`);
      // Nor from a dead entry (given up on, or a conflict kept), nor a received one (due already).
      const gone = kit.key('replay-with-dead');
      const goneRecord = (await dead(kit, gone)).record;
      must(
        !(await replayWith(gone, kit.record(gone, { amount: 1 }), ['failed'])),
        `replayWith(${gone}, [failed]) of a dead entry resolved true`,
      );
      same((await kit.entry(gone)).record, goneRecord, `the record of ${gone} after a refused replayWith`);
      same((await kit.entry(gone)).status, 'dead', `status of ${gone} after a replayWith from failed`);
      // Never under a live lease, whatever the status: a failed entry's retry holds it (its attempt runs on
      // the record it leased).
      const retried = kit.key('replay-with-retried');
      const retriedRecord = (await kit.failed(retried, -1000)).record;
      const retry = await take(kit, retried);
      const leasedStatus = (await kit.entry(retried)).status;
      must(
        !(await replayWith(retried, kit.record(retried, { amount: 1 }), [leasedStatus])),
        `replayWith(${retried}, [${leasedStatus}]) of a failed entry under a live lease resolved true`,
      );
      same((await kit.entry(retried)).record, retriedRecord, `the record of ${retried} under its lease`);
      must(
        await kit.store.settle(retried, retry.id, { status: 'delivered' }),
        `the retry's lease did not settle ${retried} after a refused replayWith`,
      );
      const unknown = kit.key('replay-with-unknown');
      must(
        !(await replayWith(unknown, kit.record(unknown), ['failed'])),
        'replayWith() of an unknown key resolved true',
      );
      must((await kit.store.get(unknown)) === undefined, 'replayWith() of an unknown key created it');
      // Sent at once (two instances' sweeps): exactly one takes the kept entry, and its record is in place.
      const twice = kit.key('replay-with-twice');
      await kit.failed(twice, century);
      const records = Array.from({ length: kit.concurrency }, (_, index) =>
        kit.record(twice, { custom_data: `copy-${index}` }),
      );
      const answers = await atOnce(records.length, (index) =>
        kit.at(index).replayWith!(twice, records[index]!, ['failed']),
      );
      const winners = answers.flatMap((answer, index) => (answer ? [index] : []));
      must(
        winners.length === 1,
        `${records.length} concurrent replayWith(${twice}, [failed]): ${winners.length} resolved true, expected exactly 1`,
      );
      same(
        (await kit.entry(twice)).record,
        records[winners[0]!],
        `record of ${twice} (the one replayWith that resolved true)`,
      );
      // One write: read while it runs, the entry is never due with the kept copy's record (a lease then, or
      // the record's write failing after, would deliver the forgery), only kept or replaced.
      const racing = kit.key('replay-with-atomic');
      const forged = kit.record(racing, { custom_data: 'forged', amount: 1 });
      const kept = await kit.failed(racing, century, forged);
      const replacing = replayWith(racing, kit.record(racing, { custom_data: 'genuine' }), ['failed']);
      let finished = false;
      const settled = replacing.finally(() => (finished = true));
      settled.catch(() => undefined); // awaited below; a rejection is the rule's failure, never unhandled
      const reads: Array<Promise<InboxEntry | undefined>> = [];
      for (let index = 0; index < 200 && (index < 20 || !finished); index += 1) {
        reads.push(kit.store.get(racing));
        if (index % 20 === 19) await new Promise((resolve) => setImmediate(resolve));
      }
      must(await settled, `replayWith(${racing}, [failed]) of a kept entry resolved false`);
      const due = (await Promise.all(reads)).filter(
        (read) =>
          read !== undefined &&
          read.record['custom_data'] === 'forged' &&
          (read.status !== kept.status || read.nextAttemptAt.getTime() < kept.nextAttemptAt.getTime()),
      ).length;
      must(
        due === 0,
        `get(${racing}) found it with the kept copy's record, made due, ${due} times while replayWith() ran: the record and the due time must change in one write`,
      );
    },
  },
];
