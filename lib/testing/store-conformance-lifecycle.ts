import type { LifecycleStore } from '../stores/lifecycle-store.js';
import { atOnce, same, type Rule, type RuleKit } from './store-conformance-kit.js';

/** The lifecycle of the `index`th instance (the runner runs these rules only when the store has one). */
const at = (kit: RuleKit, index = 0): LifecycleStore => kit.at(index).lifecycle!;

/** A transaction id of this run. */
const transaction = (kit: RuleKit): string => kit.key('lifecycle').split(':')[0]!;

/** The rules of `store.lifecycle`: a FAILED after an accepted SUCCESSFUL is a conflict, atomically. */
export const LIFECYCLE_RULES: Rule[] = [
  {
    name: 'lifecycle-decide',
    needs: 'lifecycle',
    async run(kit) {
      const lifecycle = at(kit);
      const paid = transaction(kit);
      same(await lifecycle.decide(paid, 'SUCCESSFUL', kit.longMs), 'accepted', 'a first SUCCESSFUL');
      same(await lifecycle.decide(paid, 'FAILED', kit.longMs), 'conflict', 'a FAILED after the SUCCESSFUL');
      same(await lifecycle.decide(paid, 'FAILED', kit.longMs), 'conflict', 'that FAILED asked again');
      same(await lifecycle.decide(paid, 'SUCCESSFUL', kit.longMs), 'accepted', 'the SUCCESSFUL asked again');
      const turned = transaction(kit);
      same(await lifecycle.decide(turned, 'FAILED', kit.longMs), 'accepted', 'a first FAILED');
      same(await lifecycle.decide(turned, 'FAILED', kit.longMs), 'accepted', 'that FAILED asked again');
      same(
        await lifecycle.decide(turned, 'SUCCESSFUL', kit.longMs),
        'accepted',
        'a SUCCESSFUL after a FAILED',
      );
      same(
        await lifecycle.decide(turned, 'FAILED', kit.longMs),
        'conflict',
        'a FAILED after the SUCCESSFUL that followed a FAILED',
      );
    },
  },
  {
    name: 'lifecycle-atomic',
    needs: 'lifecycle',
    async run(kit) {
      // Per transaction, a FAILED and a SUCCESSFUL at once on two instances: whichever went first, the
      // SUCCESSFUL is accepted, and from then on every FAILED is a conflict. A read then a separate write
      // lets the FAILED overwrite the SUCCESSFUL it did not see.
      const ids = Array.from({ length: kit.concurrency }, () => transaction(kit));
      await atOnce(ids.length, async (index) => {
        const id = ids[index]!;
        const [, successful] = await Promise.all([
          at(kit, index).decide(id, 'FAILED', kit.longMs),
          at(kit, index + 1).decide(id, 'SUCCESSFUL', kit.longMs),
        ]);
        same(successful, 'accepted', `a SUCCESSFUL of ${id} decided with a FAILED at once`);
      });
      for (const [index, id] of ids.entries()) {
        same(
          await at(kit, index).decide(id, 'FAILED', kit.longMs),
          'conflict',
          `a FAILED of ${id} afterwards`,
        );
      }
      // Many decisions of one transaction at once, both states: every SUCCESSFUL accepted, then a conflict.
      const one = transaction(kit);
      const verdicts = await atOnce(kit.concurrency * 2, (index) =>
        at(kit, index).decide(one, index % 2 === 0 ? 'FAILED' : 'SUCCESSFUL', kit.longMs),
      );
      same(
        verdicts.filter((_, index) => index % 2 === 1),
        verdicts.filter((_, index) => index % 2 === 1).map(() => 'accepted'),
        `the SUCCESSFUL decisions of ${one}, among FAILED ones at once`,
      );
      same(await at(kit).decide(one, 'FAILED', kit.longMs), 'conflict', `a FAILED of ${one} afterwards`);
    },
  },
];
