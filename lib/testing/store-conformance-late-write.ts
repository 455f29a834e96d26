import { randomUUID } from 'node:crypto';
import type { DeliveryTransaction } from '../stores/store.js';
import { must, type Rule, type RuleKit } from './store-conformance-kit.js';

/** How an attempt ends before its late write: abandoned (its listeners still running), failed, delivered. */
type Ending = 'abandoned' | 'failed' | 'delivered';

/** The handles a listener writes through: `tx`, and `db` when the store gives another one. */
function handlesOf(opened: DeliveryTransaction): Array<['tx' | 'db', unknown]> {
  const handles: Array<['tx' | 'db', unknown]> = [['tx', opened.tx]];
  if (opened.db !== undefined && opened.db !== opened.tx) handles.push(['db', opened.db]);
  return handles;
}

/** Whether `write` rejected (as it must once the attempt ended), without letting the rejection escape. */
async function rejects(write: () => Promise<unknown>): Promise<boolean> {
  try {
    await write();
    return false;
  } catch {
    return true;
  }
}

/** A macrotask: what ran at once after a call (its microtasks) has run. */
const tick = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * One attempt that ends as `ending`, with a write through each of its handles in time and more after the
 * end: the writes in time must land only when delivered, and every late one must reject and land nowhere.
 */
async function endThenWrite(kit: RuleKit, ending: Ending): Promise<void> {
  const probe = kit.lateWrite!;
  const key = kit.key(`late-write-${ending}`);
  const lease = kit.lease();
  must(await kit.store.receive(key, kit.record(key), lease), `receive(${key}) resolved false`);
  const opened = await kit.store.begin!(key, lease.id);
  must(opened !== undefined, `begin(${key}) resolved undefined: the store opened no transaction`);
  const handles = handlesOf(opened);
  const inTime: string[] = [];
  for (const [, handle] of handles) {
    const id = randomUUID();
    await probe.write(handle, id); // a listener's write in time (it opens a transaction opened lazily)
    inTime.push(id);
  }
  const late: Array<{ id: string; through: string; when: string; rejected: boolean }> = [];
  const writeLate = async (when: string) => {
    for (const [through, handle] of handles) {
      const id = randomUUID();
      late.push({ id, through, when, rejected: await rejects(() => probe.write(handle, id)) });
    }
  };
  if (ending === 'delivered') {
    const outcome = await opened.commit();
    must(
      outcome === 'delivered',
      `commit() of ${key}, its lease holding, resolved ${JSON.stringify(outcome)}`,
    );
    await writeLate('once commit() had resolved');
  } else if (ending === 'failed') {
    const rolledBack = opened.rollback();
    await writeLate('at once after rollback() was called');
    await rolledBack;
    await writeLate('once rollback() had resolved');
  } else {
    // Abandoned: its listeners still run (the promise delivery gives rollback settles once they have), and
    // one of them writes now, late.
    let finish!: () => void;
    const listeners = new Promise<void>((resolve) => (finish = resolve));
    const rolledBack = opened.rollback(listeners);
    await writeLate('at once after rollback(listeners) was called');
    await tick();
    await writeLate('while the abandoned listeners still ran');
    finish();
    await rolledBack;
    await writeLate('once rollback(listeners) had resolved');
  }
  // Every late write is checked before the rule fails, so that its message says which of them got through.
  const wrong: string[] = [];
  for (const { id, through, when, rejected } of late) {
    const landed = await probe.landed(id);
    if (!rejected || landed) {
      wrong.push(
        `through ${through} ${when}: ${rejected ? 'rejected' : 'resolved'}${landed ? ', and landed' : ''}`,
      );
    }
  }
  must(
    wrong.length === 0,
    `late writes through ${key}'s transaction (the attempt ${ending}) must reject and land nowhere, or a ` +
      `late credit may land outside the delivery: ${wrong.join('; ')}`,
  );
  for (const id of inTime) {
    const landed = await probe.landed(id);
    if (ending === 'delivered') {
      must(
        landed,
        `a write made in time through ${key}'s transaction did not land once it was delivered (does lateWrite.landed read what lateWrite.write wrote?)`,
      );
    } else {
      must(!landed, `a write made in time through ${key}'s transaction landed, though the attempt ${ending}`);
    }
  }
}

/**
 * The rule of a store with transactional delivery (`begin`): once an attempt was abandoned (timed out, its
 * listeners still running), failed or delivered, a write through its `tx` or `db` rejects and lands nowhere,
 * so a late credit never lands outside the delivery's transaction (nor in a retry's, nor on its own).
 */
export const LATE_WRITE_RULES: Rule[] = [
  {
    name: 'late-write',
    needs: 'lateWrite',
    async run(kit) {
      for (const ending of ['abandoned', 'failed', 'delivered'] as const) await endThenWrite(kit, ending);
    },
  },
];
