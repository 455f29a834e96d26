import { MemoryStore, type Store } from '../../../lib/index.js';
import { runStoreConformance } from '../../../lib/testing.js';

/** A store of the claim rules that answers right, in memory. */
class PlainStore implements Store {
  readonly #tokens = new Map<string, { token: string; until: number }>();
  claim(key: string, ttlMs: number, token: string): boolean {
    const held = this.#tokens.get(key);
    if (held && held.until > Date.now()) return held.token === token;
    this.#tokens.set(key, { token, until: Date.now() + ttlMs });
    return true;
  }
  release(key: string): void | Promise<void> {
    this.#tokens.delete(key);
  }
}

describe('runStoreConformance', () => {
  test('a store that keeps the claim rules passes them; the inbox rules are skipped, saying why', async () => {
    const { failures, passed, skipped } = await runStoreConformance(() => new PlainStore());
    expect(failures).toEqual([]);
    expect(passed).toEqual([
      'interface',
      'claim-atomic',
      'claim-held',
      'claim-ttl',
      'claim-token-idempotent',
      'release',
    ]);
    expect(skipped).toContainEqual({
      rule: 'receive-once',
      reason: 'the store is not durable (at most once only)',
    });
    expect(skipped).toContainEqual({
      rule: 'expectations-lock',
      reason: 'the store is not durable (at most once only)',
    });
  });

  test('a call that throws fails its rule with the error, and the other rules still run', async () => {
    class Throwing extends PlainStore {
      override release(): void {
        throw new Error('the backend is down');
      }
    }
    const { failures, passed } = await runStoreConformance(() => new Throwing());
    expect(failures).toEqual([{ rule: 'release', message: 'a call threw: the backend is down' }]);
    expect(passed).toContain('claim-atomic');
  });

  test('a call that never answers fails its rule once ruleTimeoutMs has passed', async () => {
    class Hanging extends PlainStore {
      override release(): Promise<void> {
        return new Promise(() => {});
      }
    }
    const { failures } = await runStoreConformance(() => new Hanging(), { ruleTimeoutMs: 200 });
    expect(failures).toEqual([
      { rule: 'release', message: 'the rule did not finish within 200 ms (a call never answered?)' },
    ]);
  });

  test('a createStore that fails fails every rule, saying so', async () => {
    const { failures, passed } = await runStoreConformance(() => Promise.reject(new Error('no database')));
    expect(passed).toEqual([]);
    expect(failures[0]).toEqual({ rule: 'interface', message: 'createStore() failed: no database' });
  });

  test('a store is created for each rule, and closed after it', async () => {
    let opened = 0;
    let closed = 0;
    const { passed, skipped } = await runStoreConformance(
      () => {
        opened += 1;
        return Object.assign(new MemoryStore(), { close: () => void (closed += 1) });
      },
      { skip: ['claim-token-idempotent'] },
    );
    expect(passed.length).toBeGreaterThan(30);
    expect(closed).toBe(opened);
    // late-write too: its store is opened to find it has no begin(), then closed. Not the one skipped by name.
    expect(skipped.map(({ rule }) => rule)).toEqual(['claim-token-idempotent', 'late-write']);
    expect(opened).toBe(passed.length + 1);
  });

  test.each([
    [
      { skip: ['claim-atomc'] },
      /skip must list rule names, got claim-atomc \(the rules: interface, claim-atomic,/,
    ],
    [{ concurrency: 1 }, /concurrency must be a whole number of at least 2, got 1/],
    [{ timeScale: 0 }, /timeScale must be a positive number, got 0/],
    [{ ruleTimeoutMs: -1 }, /ruleTimeoutMs must be a positive number of milliseconds, got -1/],
  ])('throws a TypeError for the options %p', async (options, message) => {
    await expect(runStoreConformance(() => new PlainStore(), options)).rejects.toThrow(TypeError);
    await expect(runStoreConformance(() => new PlainStore(), options)).rejects.toThrow(message);
  });
});
