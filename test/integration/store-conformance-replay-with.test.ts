import { MemoryStore, type DurableStore } from 'ipn-kit';
import { runStoreConformance, type Lease } from 'ipn-kit/testing';

type Statuses = Parameters<NonNullable<DurableStore['replayWith']>>[2];

/**
 * The rule `replay-with` against stores that break `replayWith` in ways that cost money or the contract:
 * each must fail it. Its reason to exist is that the forged copy kept under a genuine payment's key is
 * never deliverable: the record replaced and the entry made due in ONE write.
 */
describe('runStoreConformance: replay-with on broken stores', () => {
  const only = ['replay-with'];

  /**
   * `replay(key, 0, from)`, then the record in a second write: in between, the kept forgery is due, and a
   * recovery pass leasing it then delivers the forgery (or it stays due, the second write failing).
   */
  class ReplayThenRecordStore extends MemoryStore {
    override async replayWith(key: string, record: Record<string, unknown>, from: Statuses) {
      if (!(await this.replay(key, 0, from))) return false;
      await new Promise((resolve) => setImmediate(resolve)); // the second statement's round trip
      return super.replayWith(key, record, ['received']);
    }
  }

  test('a replayWith that makes the kept copy due before it writes the record fails replay-with', async () => {
    const { failures } = await runStoreConformance(() => new ReplayThenRecordStore(), { only });
    expect(failures.map((failure) => failure.rule)).toEqual(['replay-with']);
    expect(failures[0]?.message).toMatch(
      /with the kept copy's record, made due, \d+ times while replayWith\(\) ran/,
    );
  }, 60_000);

  /**
   * `from` taken loosely: a `dead` entry (a payment given up on, a conflict kept) is replaced and made due too.
   * (One that also took `received` is caught already, by the concurrent calls.)
   */
  class FromLooseStore extends MemoryStore {
    override replayWith(key: string, record: Record<string, unknown>, from: Statuses) {
      return super.replayWith(key, record, [...new Set([...from, 'dead' as const])]);
    }
  }

  test('a replayWith that also takes entries in statuses not in from fails replay-with', async () => {
    const { failures } = await runStoreConformance(() => new FromLooseStore(), { only });
    expect(failures.map((failure) => failure.rule)).toEqual(['replay-with']);
    expect(failures[0]?.message).toMatch(/replayWith\(.*, \[failed\]\) of a dead entry resolved true/);
  }, 60_000);

  /** The lease checked only on a `received` entry: a `failed` entry under a retry's live lease is replaced. */
  class LeaseBlindWhenFailedStore extends MemoryStore {
    readonly #holders = new Map<string, Lease>();
    override async lease(lease: Lease, limit: number) {
      const taken = await super.lease(lease, limit);
      for (const entry of taken) this.#holders.set(entry.key, lease);
      return taken;
    }
    override async replayWith(key: string, record: Record<string, unknown>, from: Statuses) {
      const entry = await this.get(key);
      const holder = this.#holders.get(key);
      const live = entry?.leaseUntil !== null && (entry?.leaseUntil?.getTime() ?? 0) >= Date.now();
      if (entry?.status === 'failed' && from.includes('failed') && live && holder !== undefined)
        return this.replace(key, holder.id, record, holder);
      return super.replayWith(key, record, from);
    }
  }

  test('a replayWith that ignores the live lease of a failed entry fails replay-with', async () => {
    const { failures } = await runStoreConformance(() => new LeaseBlindWhenFailedStore(), { only });
    expect(failures.map((failure) => failure.rule)).toEqual(['replay-with']);
    expect(failures[0]?.message).toMatch(
      /replayWith\(.*\) of a failed entry under a live lease resolved true/,
    );
  }, 60_000);

  test('MemoryStore still passes replay-with', async () => {
    const { failures, passed } = await runStoreConformance(() => new MemoryStore(), { only });
    expect(failures).toEqual([]);
    expect(passed).toEqual(['replay-with']);
  }, 60_000);
});
