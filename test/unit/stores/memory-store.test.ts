import { MemoryStore } from '../../../lib/stores/memory/memory-store.js';

const DAY = 24 * 60 * 60 * 1000;

/** A store on a clock the test moves by hand. */
function storeAt(start = 1_000_000, maxEntries?: number) {
  let time = start;
  const store = new MemoryStore({ now: () => time, ...(maxEntries === undefined ? {} : { maxEntries }) });
  return {
    store,
    advance: (ms: number) => {
      time += ms;
    },
  };
}

describe('MemoryStore', () => {
  it('lets the first claim of a key succeed and refuses the second', () => {
    const store = new MemoryStore();
    expect(store.claim('EFB.001158:SUCCESSFUL', DAY)).toBe(true);
    expect(store.claim('EFB.001158:SUCCESSFUL', DAY)).toBe(false);
  });

  it('a claim and a receive of one key exclude each other (two routers in different delivery modes on one store)', async () => {
    const { store, advance } = storeAt();
    const record = { transaction_id: 'EFB.1', state: 'SUCCESSFUL' };
    const lease = { id: 'lease', ms: 60_000 };
    expect(store.claim('EFB.1:SUCCESSFUL', 1_000)).toBe(true);
    expect(await store.receive('EFB.1:SUCCESSFUL', record, lease)).toBe(false);
    advance(1_001); // the claim expired: it holds nothing
    expect(await store.receive('EFB.1:SUCCESSFUL', record, lease)).toBe(true);
    expect(await store.receive('EFB.2:SUCCESSFUL', { ...record, transaction_id: 'EFB.2' }, lease)).toBe(true);
    expect(store.claim('EFB.2:SUCCESSFUL', 1_000)).toBe(false);
    expect(store.claim('EFB.2:SUCCESSFUL', 1_000, 'a token')).toBe(false);
  });

  it("a lifecycle decision with a shorter ttlMs never cuts the time a SUCCESSFUL is kept (two routers' ttlMs on one store)", () => {
    const { store, advance } = storeAt();
    expect(store.lifecycle.decide('EFB.7', 'SUCCESSFUL', DAY)).toBe('accepted');
    expect(store.lifecycle.decide('EFB.7', 'FAILED', 1_000)).toBe('conflict');
    advance(60_000); // past the short ttlMs, well within the day the SUCCESSFUL was accepted for
    expect(store.lifecycle.decide('EFB.7', 'FAILED', DAY)).toBe('conflict');
  });

  it('checks its arguments as every store does: a bad lease, lease() limit or list() option is a TypeError', async () => {
    const store = new MemoryStore();
    const record = { transaction_id: 'EFB.1', state: 'SUCCESSFUL' };
    await expect(store.receive('EFB.1:SUCCESSFUL', record, { id: '', ms: 1000 })).rejects.toThrow(
      /MemoryStore: a lease must have a non-empty id and a positive ms/,
    );
    await expect(store.receive('EFB.1:SUCCESSFUL', record, { id: 'l', ms: 0 })).rejects.toThrow(TypeError);
    await expect(store.replace('EFB.1:SUCCESSFUL', 'l', record, { id: 'l', ms: NaN })).rejects.toThrow(
      TypeError,
    );
    await expect(store.lease({ id: 'l', ms: 1000 }, 1.5)).rejects.toThrow(
      /MemoryStore\.lease: limit must be a whole number/,
    );
    await expect(store.list({ status: 'gone' as never })).rejects.toThrow(
      /MemoryStore\.list: status must be one of/,
    );
    await expect(store.list({ offset: -1 })).rejects.toThrow(TypeError);
    expect(await store.list()).toEqual([]); // nothing was stored by the refused calls
  });

  it('checks replayWith() arguments as every store does: no status to replay from, or an unknown one, is a TypeError', async () => {
    const store = new MemoryStore();
    const record = { transaction_id: 'EFB.1', state: 'SUCCESSFUL' };
    expect(await store.receive('EFB.1:SUCCESSFUL', record, { id: 'l', ms: 1000 })).toBe(true);
    await expect(store.replayWith('EFB.1:SUCCESSFUL', record, [])).rejects.toThrow(
      /MemoryStore\.replayWith: from must list some of received, delivered, failed, dead/,
    );
    await expect(store.replayWith('EFB.1:SUCCESSFUL', record, ['gone' as never])).rejects.toThrow(TypeError);
    await expect(store.replayWith('EFB.1:SUCCESSFUL', null as never, ['received'])).rejects.toThrow(
      /MemoryStore\.replayWith: record must be an object/,
    );
  });

  it('keeps different keys independent', () => {
    const store = new MemoryStore();
    expect(store.claim('EFB.001158:SUCCESSFUL', DAY)).toBe(true);
    expect(store.claim('EFB.001158:FAILED', DAY)).toBe(true);
    expect(store.claim('EFB.001159:SUCCESSFUL', DAY)).toBe(true);
    expect(store.claim('EFB.001158:FAILED', DAY)).toBe(false);
  });

  it('frees a released key, so the next claim of it succeeds', () => {
    const store = new MemoryStore();
    store.claim('a', DAY);
    store.release('a');
    expect(store.claim('a', DAY)).toBe(true);
    expect(store.claim('a', DAY)).toBe(false);
  });

  it('releases a key that was never claimed without harm', () => {
    const store = new MemoryStore();
    expect(() => store.release('never')).not.toThrow();
    expect(store.claim('never', DAY)).toBe(true);
  });

  it('holds a key until its ttl has passed, then lets it be claimed again', () => {
    const { store, advance } = storeAt();
    expect(store.claim('a', 1000)).toBe(true);
    advance(999);
    expect(store.claim('a', 1000)).toBe(false);
    advance(2);
    expect(store.claim('a', 1000)).toBe(true);
    expect(store.claim('a', 1000)).toBe(false);
  });

  it('does not extend a key when a claim of it is refused', () => {
    const { store, advance } = storeAt();
    store.claim('a', 1000);
    advance(900);
    expect(store.claim('a', 1000)).toBe(false);
    advance(200);
    expect(store.claim('a', 1000)).toBe(true);
  });

  it('sweeps expired keys when a new key is claimed', () => {
    const { store, advance } = storeAt();
    store.claim('a', 10);
    store.claim('b', 10);
    expect(store.size).toBe(2);
    advance(11);
    store.claim('c', 10);
    expect(store.size).toBe(1);
  });

  it('holds at most maxEntries keys, forgetting the oldest first', () => {
    const store = new MemoryStore({ maxEntries: 3 });
    for (let i = 0; i < 3 + 4; i += 1) {
      expect(store.claim(`key-${i}`, DAY)).toBe(true);
      expect(store.size).toBeLessThanOrEqual(3);
    }
    // The newest is still held; the oldest was forgotten, so it can be claimed again.
    expect(store.claim('key-6', DAY)).toBe(false);
    expect(store.claim('key-0', DAY)).toBe(true);
    expect(store.size).toBeLessThanOrEqual(3);
  });

  it('counts the keys forgotten before they expired, and not the expired ones it sweeps', () => {
    const { store, advance } = storeAt(1_000_000, 2);
    store.claim('short', 10);
    store.claim('long-1', DAY);
    advance(11);
    store.claim('long-2', DAY); // sweeps 'short': expired, not an eviction
    expect(store.evictions).toBe(0);
    store.claim('long-3', DAY); // full: forgets 'long-1' early
    expect(store.evictions).toBe(1);
  });

  it('holds a key until the instant it expires, and frees it at that instant', () => {
    const { store, advance } = storeAt(0);
    store.claim('a', 10);
    advance(9);
    expect(store.claim('a', 10)).toBe(false);
    advance(1);
    expect(store.claim('a', 10)).toBe(true);
  });

  it('does not count a key that expires exactly when it is swept as an eviction', () => {
    const { store, advance } = storeAt(0, 1);
    store.claim('a', 10);
    advance(10);
    store.claim('b', 10);
    expect(store.evictions).toBe(0);
  });

  it('keeps a re-claimed key by its new claim time, not its first one, when forgetting the oldest', () => {
    const { store, advance } = storeAt(0, 3);
    store.claim('a', 1000);
    store.claim('b', 10);
    store.claim('c', 1000);
    advance(20);
    expect(store.claim('b', 1000)).toBe(true); // expired, claimed again: now the newest
    expect(store.evictions).toBe(0); // it replaced its own expired claim: nothing had to make room
    store.claim('d', 1000); // full: forgets 'a', the oldest live claim
    expect(store.claim('b', 1000)).toBe(false);
    expect(store.claim('a', 1000)).toBe(true);
  });

  it('stays bounded and correct when keys are claimed and released over and over', () => {
    const store = new MemoryStore({ maxEntries: 10 });
    for (let i = 0; i < 20_000; i += 1) {
      expect(store.claim('churn', DAY)).toBe(true);
      store.release('churn');
    }
    store.claim('kept', DAY);
    expect(store.size).toBe(1);
    expect(store.claim('kept', DAY)).toBe(false);
  });

  it('defaults maxEntries to 100000', () => {
    expect(new MemoryStore().maxEntries).toBe(100_000);
  });

  it('forgets every key on clear', () => {
    const store = new MemoryStore();
    store.claim('a', DAY);
    store.clear();
    expect(store.size).toBe(0);
    expect(store.claim('a', DAY)).toBe(true);
  });

  it.each([0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY])(
    'throws a TypeError naming maxEntries for maxEntries %p',
    (maxEntries) => {
      expect(() => new MemoryStore({ maxEntries })).toThrow(TypeError);
      expect(() => new MemoryStore({ maxEntries })).toThrow(/maxEntries/);
    },
  );
  it('hands out copies of the record: editing what get or list answered (its record, a date) leaves the inbox as it was', async () => {
    const store = new MemoryStore();
    const record = { transaction_id: 'EFB.1', state: 'SUCCESSFUL', amount: 1500, extra: { note: 'kept' } };
    await store.receive('EFB.1:SUCCESSFUL', record, { id: 'lease-1', ms: DAY });
    const got = (await store.get('EFB.1:SUCCESSFUL'))!;
    got.record.amount = -1;
    got.receivedAt.setTime(0);
    (await store.list())[0]!.record.extra = 'changed';
    const kept = await store.get('EFB.1:SUCCESSFUL');
    expect(kept?.record).toEqual(record);
    expect(kept?.receivedAt.getTime()).not.toBe(0);
  });
});
