import { randomUUID } from 'node:crypto';
import type { Expectation, ExpectationStore } from '../stores/expectation-store.js';
import { atOnce, must, same, type Rule, type RuleKit } from './store-conformance-kit.js';

/** The store's expectations (the runner runs these rules only when it has them). */
const of = (kit: RuleKit): ExpectationStore => kit.store.expectations!;

/** An expectation of a new transaction, due at `dueAt`. */
function expectation(kit: RuleKit, dueAt: number, extra: Partial<Expectation> = {}): Expectation {
  const transactionId = kit.key('expected').split(':')[0]!;
  return {
    transactionId,
    customData: 'order-1',
    amount: 1500,
    expectedAt: dueAt - 60_000,
    dueAt,
    attempts: 0,
    ...extra,
  };
}

/** Ids of `list`, sorted. */
const idsOf = (list: Expectation[]): string[] => list.map((item) => item.transactionId).sort();

/** The rules of `store.expectations` (`ipn.expect()` and its reconciliation sweep). */
export const EXPECTATION_RULES: Rule[] = [
  {
    name: 'expectations-put-get',
    needs: 'expectations',
    async run(kit) {
      const store = of(kit);
      const now = Date.now();
      const a = expectation(kit, now);
      await store.put(a);
      same(await store.get(a.transactionId), a, `get(${a.transactionId})`);
      const changed = { ...a, customData: 'order-2', amount: 99.5, dueAt: now + 5000, attempts: 2 };
      await store.put(changed);
      same(await store.get(a.transactionId), changed, `get(${a.transactionId}) after a second put`);
      const bare = expectation(kit, now, { customData: undefined, amount: undefined });
      await store.put(bare);
      same(
        await store.get(bare.transactionId),
        bare,
        `get(${bare.transactionId}) of one without customData and amount`,
      );
      await store.delete(a.transactionId);
      must(
        (await store.get(a.transactionId)) === undefined,
        `get(${a.transactionId}) after delete() was not undefined`,
      );
      must((await store.get(randomUUID())) === undefined, 'get() of an unknown id was not undefined');
      await store.delete(randomUUID());
    },
  },
  {
    name: 'expectations-take-due',
    needs: 'expectations',
    async run(kit) {
      const store = of(kit);
      const now = Date.now();
      const [a, b, later] = [
        expectation(kit, now - 2000),
        expectation(kit, now),
        expectation(kit, now + 60_000),
      ];
      for (const item of [a, b, later]) await store.put(item);
      const next = now + 30_000;
      const taken = await store.takeDue(now, next, 10);
      same(idsOf(taken), idsOf([a, b]), `the ids takeDue(now) took`);
      for (const item of taken)
        same([item.dueAt, item.attempts], [next, 1], `[dueAt, attempts] of ${item.transactionId} as taken`);
      same(
        await store.get(a.transactionId),
        { ...a, dueAt: next, attempts: 1 },
        `get(${a.transactionId}) once taken`,
      );
      same(await store.get(later.transactionId), later, `get(${later.transactionId}), not due`);
      same(await store.takeDue(now, next, 10), [], 'a second takeDue(now) (the due ones moved on)');
      const many = Array.from({ length: 3 }, () => expectation(kit, now - 1000));
      for (const item of many) await store.put(item);
      same((await store.takeDue(now, next, 2)).length, 2, 'how many takeDue(now, next, 2) took of 3 due');
    },
  },
  {
    // The account whose API key created the transaction: the sweep asks with that key first.
    name: 'expectations-account',
    needs: 'expectations',
    async run(kit) {
      const store = of(kit);
      const now = Date.now();
      const zoned = expectation(kit, now - 1000, { account: 'zone-B ünïcode' });
      await store.put(zoned);
      same(await store.get(zoned.transactionId), zoned, `get(${zoned.transactionId}) with an account`);
      const taken = (await store.takeDue(now, now + 30_000, 100)).find(
        (item) => item.transactionId === zoned.transactionId,
      );
      same(taken?.account, zoned.account, `the account of ${zoned.transactionId} as takeDue() took it`);
      const moved = { ...zoned, account: 'zone-A', dueAt: now + 30_000, attempts: 1 };
      await store.put(moved);
      same(
        await store.get(zoned.transactionId),
        moved,
        `get(${zoned.transactionId}) after a put with another account`,
      );
      const none = { ...moved, account: undefined };
      await store.put(none);
      same(
        await store.get(zoned.transactionId),
        none,
        `get(${zoned.transactionId}) after a put with no account`,
      );
    },
  },
  {
    // Instances sweep at the same time: each due expectation is taken by one of them.
    name: 'expectations-take-due-concurrent',
    needs: 'expectations',
    async run(kit) {
      const store = of(kit);
      const now = Date.now();
      const all = Array.from({ length: 20 }, () => expectation(kit, now - 1000));
      for (const item of all) await store.put(item);
      const rounds = await atOnce(Math.min(kit.concurrency, 10), (index) =>
        kit.at(index).expectations!.takeDue(now, now + 60_000, 3),
      );
      const taken = [...rounds.flat(), ...(await store.takeDue(now, now + 60_000, 100))];
      const ids = idsOf(taken);
      const twice = ids.filter((id, index) => ids[index - 1] === id);
      must(
        twice.length === 0,
        `concurrent takeDue() calls took the same expectations: ${[...new Set(twice)].join(', ')}`,
      );
      same(ids, idsOf(all), 'the ids concurrent takeDue() calls took, then one more');
    },
  },
  {
    name: 'expectations-lock',
    needs: 'expectations',
    async run(kit) {
      const store = of(kit);
      const [a, b] = [randomUUID(), randomUUID()];
      must(await store.lockSweep(a, kit.longMs), 'lockSweep() of a free lock resolved false');
      must(
        !(await store.lockSweep(b, kit.longMs)),
        'lockSweep() by a second owner resolved true while the first holds it',
      );
      must(await store.lockSweep(a, kit.longMs), 'lockSweep() by the owner (to extend it) resolved false');
      await store.unlockSweep(b);
      must(!(await store.lockSweep(b, kit.longMs)), 'unlockSweep() by another owner let go of the lock');
      await store.unlockSweep(a);
      must(await store.lockSweep(b, kit.longMs), 'lockSweep() after the owner unlocked it resolved false');
    },
  },
  {
    name: 'expectations-lock-expiry',
    needs: 'expectations',
    async run(kit) {
      const store = of(kit);
      const [a, b] = [randomUUID(), randomUUID()];
      must(await store.lockSweep(a, kit.shortMs), 'lockSweep() of a free lock resolved false');
      await kit.eventually(
        `lockSweep() by another owner after the ${kit.shortMs} ms lock ran out`,
        async () => Boolean(await store.lockSweep(b, kit.longMs)),
      );
      must(!(await store.lockSweep(a, kit.longMs)), 'the first owner took the lock back from the second');
    },
  },
];
