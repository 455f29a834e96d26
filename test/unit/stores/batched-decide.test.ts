import { StoreError } from '../../../lib/shared/errors.js';
import { batchedDecide, type Decision } from '../../../lib/stores/lifecycle-store.js';

/**
 * A store's decideMany over a Map, as the stores' statements decide (a SUCCESSFUL is never overwritten;
 * each decision answers the state kept after it), recording each call; `reply` may change what it answers.
 */
function fakeStore(reply: (states: unknown[], decisions: Decision[]) => unknown[] = (states) => states) {
  const kept = new Map<string, string>();
  const calls: string[][] = [];
  const decideMany = async (decisions: Decision[]): Promise<unknown[]> => {
    calls.push(decisions.map(({ transactionId, state }) => `${transactionId} ${state}`));
    await Promise.resolve();
    const states = decisions.map(({ transactionId, state }) => {
      if (kept.get(transactionId) !== 'SUCCESSFUL') kept.set(transactionId, state);
      return kept.get(transactionId);
    });
    return reply(states, decisions);
  };
  const check = (transactionId: string): void => {
    if (transactionId === 'BAD') throw new TypeError('the store cannot hold BAD');
  };
  return { kept, calls, decide: batchedDecide(decideMany, () => 5_000, check) };
}
const ttlMs = 60_000;

describe('batchedDecide (the lifecycle’s group commit)', () => {
  test('an id the store cannot hold fails its own decision, never sent: the decisions queued with it are decided', async () => {
    const { calls, decide } = fakeStore();
    const first = decide({ transactionId: 'T0', state: 'SUCCESSFUL', ttlMs });
    const batch = [
      decide({ transactionId: 'A', state: 'SUCCESSFUL', ttlMs }),
      decide({ transactionId: 'BAD', state: 'FAILED', ttlMs }),
      decide({ transactionId: 'A', state: 'FAILED', ttlMs }),
    ];
    const allSettled = Promise.allSettled(batch); // handled at once: one of them rejects
    await expect(first).resolves.toBe('accepted');
    const settled = await allSettled;
    expect(settled.map((result) => (result.status === 'fulfilled' ? result.value : result.reason))).toEqual([
      'accepted',
      new TypeError('the store cannot hold BAD'),
      'conflict',
    ]);
    expect(calls.flat().some((decided) => decided.startsWith('BAD'))).toBe(false);
  });

  test('a StoreError decideMany resolves for one decision rejects that decision alone, never read as a state', async () => {
    const refused = new StoreError('the store refused B alone');
    const { decide } = fakeStore((states, decisions) =>
      states.map((state, at) => (decisions[at]!.transactionId === 'B' ? refused : state)),
    );
    const first = decide({ transactionId: 'T0', state: 'SUCCESSFUL', ttlMs });
    const batch = Promise.allSettled([
      decide({ transactionId: 'A', state: 'FAILED', ttlMs }),
      decide({ transactionId: 'B', state: 'FAILED', ttlMs }),
      decide({ transactionId: 'C', state: 'SUCCESSFUL', ttlMs }),
    ]);
    await expect(first).resolves.toBe('accepted');
    const settled = await batch;
    expect(settled.map((result) => (result.status === 'fulfilled' ? result.value : result.reason))).toEqual([
      'accepted',
      refused,
      'accepted',
    ]);
  });

  test('decisions asked while one runs go together; two of one transaction go in separate calls, in the order asked', async () => {
    const { kept, calls, decide } = fakeStore();
    const first = decide({ transactionId: 'T0', state: 'SUCCESSFUL', ttlMs });
    const batch = [
      decide({ transactionId: 'A', state: 'SUCCESSFUL', ttlMs }),
      decide({ transactionId: 'B', state: 'FAILED', ttlMs }),
      decide({ transactionId: 'A', state: 'FAILED', ttlMs }),
      decide({ transactionId: 'C', state: 'FAILED', ttlMs }),
      decide({ transactionId: 'A', state: 'SUCCESSFUL', ttlMs }),
      decide({ transactionId: 'B', state: 'SUCCESSFUL', ttlMs }),
    ];

    expect(await first).toBe('accepted');
    // The verdicts in the order asked: A's FAILED after its SUCCESSFUL is the conflict, B's SUCCESSFUL after
    // its FAILED is accepted.
    expect(await Promise.all(batch)).toEqual([
      'accepted',
      'accepted',
      'conflict',
      'accepted',
      'accepted',
      'accepted',
    ]);
    expect(calls).toEqual([
      ['T0 SUCCESSFUL'],
      ['A SUCCESSFUL', 'B FAILED', 'C FAILED'],
      ['A FAILED', 'B SUCCESSFUL'],
      ['A SUCCESSFUL'],
    ]);
    expect(Object.fromEntries(kept)).toEqual({
      T0: 'SUCCESSFUL',
      A: 'SUCCESSFUL',
      B: 'SUCCESSFUL',
      C: 'FAILED',
    });
  });

  test('each verdict is of its own decision: the states resolved are matched by position', async () => {
    const { decide } = fakeStore();
    await decide({ transactionId: 'P', state: 'SUCCESSFUL', ttlMs });
    const first = decide({ transactionId: 'T0', state: 'FAILED', ttlMs });
    const ids = ['Q', 'P', 'R', 'S'];
    const verdicts = Promise.all(
      ids.map((transactionId) => decide({ transactionId, state: 'FAILED', ttlMs })),
    );
    expect(await first).toBe('accepted');
    expect(await verdicts).toEqual(['accepted', 'conflict', 'accepted', 'accepted']);
  });

  test('a decideMany that resolves a state too few or too many rejects every decision of its batch with a StoreError', async () => {
    for (const reply of [
      (states: unknown[]) => states.slice(1),
      (states: unknown[]) => [...states, 'FAILED'],
    ]) {
      const { decide } = fakeStore((states, decisions) => (decisions.length > 1 ? reply(states) : states));
      const first = decide({ transactionId: 'T0', state: 'FAILED', ttlMs });
      const batch = ['A', 'B', 'C'].map((transactionId) =>
        decide({ transactionId, state: 'SUCCESSFUL', ttlMs }),
      );
      expect(await first).toBe('accepted');
      const results = await Promise.allSettled(batch);
      for (const result of results) {
        expect(result.status).toBe('rejected');
        const { reason } = result as PromiseRejectedResult;
        expect(reason).toBeInstanceOf(StoreError);
        expect(String(reason)).toMatch(/a batch of 3 lifecycle decisions resolved [24] states/);
      }
      // The next batch goes as usual.
      expect(await decide({ transactionId: 'D', state: 'FAILED', ttlMs })).toBe('accepted');
    }
  });

  test('a call that fails rejects every decision of its batch, those decided in an earlier call of it too', async () => {
    let failing = true;
    const { decide } = fakeStore((states, decisions) => {
      if (
        failing &&
        decisions.length === 1 &&
        decisions[0]!.transactionId === 'A' &&
        decisions[0]!.state === 'FAILED'
      ) {
        throw new StoreError('connection lost');
      }
      return states;
    });
    const first = decide({ transactionId: 'T0', state: 'FAILED', ttlMs });
    const batch = [
      decide({ transactionId: 'A', state: 'SUCCESSFUL', ttlMs }),
      decide({ transactionId: 'B', state: 'FAILED', ttlMs }),
      decide({ transactionId: 'A', state: 'FAILED', ttlMs }),
    ];
    expect(await first).toBe('accepted');
    for (const result of await Promise.allSettled(batch)) {
      expect(result.status).toBe('rejected');
      expect(String((result as PromiseRejectedResult).reason)).toMatch(/connection lost/);
    }
    failing = false;
    // Asked again, a decision answers from what is recorded.
    expect(await decide({ transactionId: 'A', state: 'FAILED', ttlMs })).toBe('conflict');
  });
});
