import { ipnRouter, MemoryStore } from '../../lib/index.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { servedRouters } from '../helpers/servers.js';
import { until } from '../helpers/until.js';

const serve = servedRouters();

async function start(store: MemoryStore, maxAttempts = 8) {
  const ipn = ipnRouter({
    store,
    delivery: 'at-least-once',
    logger: quiet,
    retryDelayMs: 5,
    recoveryIntervalMs: 20,
    maxAttempts,
  });
  const recorder = recordEvents(ipn);
  const { post } = await serve(ipn);
  return { ipn, recorder, post };
}
const keyOf = (payload: Record<string, unknown>) => `${String(payload.transaction_id)}:SUCCESSFUL`;

describe("MemoryStore with delivery: 'at-least-once'", () => {
  test('a listener that fails twice is retried in-process and delivered once; a resend is a duplicate', async () => {
    const store = new MemoryStore();
    const { ipn, recorder, post } = await start(store);
    const attempts: number[] = [];
    ipn.on('successful', (n, { attempt }) => {
      attempts.push(attempt);
      if (attempt < 3) throw new Error('the ledger is busy');
    });
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await until(() => attempts.length === 3, 'three attempts');
    // Each failed attempt is one error: a DeliveryError whose cause is the listener's own failure.
    await until(() => recorder.count('error') === 2, 'two errors');
    for (const { error } of recorder.of('error') as Array<{ error: Error }>) {
      expect(error.name).toBe('DeliveryError');
      expect(error.cause).toMatchObject({ name: 'ListenerError' });
      expect(error.message).toContain('the ledger is busy');
    }
    const entry = await ipn.inbox.get(keyOf(payload));
    expect(entry).toMatchObject({
      status: 'delivered',
      attempts: 3,
      lastError: expect.stringContaining('the ledger is busy'),
    });
    expect(attempts).toEqual([1, 2, 3]);
    expect(await (await post(payload)).json()).toEqual({ ok: true, duplicate: true });
    expect(recorder.count('successful')).toBe(3);
    expect(await ipn.inbox.countByStatus()).toEqual({ received: 0, delivered: 1, failed: 0, dead: 0 });
  });

  test('after maxAttempts it is dead and emitted as dead; a replay delivers it', async () => {
    const store = new MemoryStore();
    const { ipn, recorder, post } = await start(store, 2);
    let healthy = false;
    ipn.on('successful', () => {
      if (!healthy) throw new Error('down');
    });
    const payload = uniquePayload();
    await post(payload);
    await until(() => recorder.count('dead') === 1, 'dead');
    expect(recorder.of('dead')[0]).toMatchObject({ key: keyOf(payload), attempts: 2 });
    expect((await ipn.inbox.list({ status: 'dead' })).map((entry) => entry.key)).toEqual([keyOf(payload)]);
    healthy = true;
    expect(await ipn.inbox.replayDead()).toBe(1);
    await until(() => recorder.count('successful') === 3, 'the replay');
    expect((await ipn.inbox.get(keyOf(payload)))?.status).toBe('delivered');
    expect(
      await ipn.inbox.purge(new Date(Date.now() + 1000), 'delivered', { insideDedupeWindow: true }),
    ).toBe(1);
    expect(await ipn.inbox.get(keyOf(payload))).toBeUndefined();
  });

  test('beyond maxEntries the oldest delivered entries are forgotten, never an undelivered one', async () => {
    const store = new MemoryStore({ maxEntries: 2 });
    const lease = { id: 'l', ms: 60_000 };
    expect(await store.receive('A:SUCCESSFUL', { n: 1 }, lease)).toBe(true);
    expect(await store.receive('B:SUCCESSFUL', { n: 2 }, lease)).toBe(true);
    expect(await store.settle('B:SUCCESSFUL', 'l', { status: 'delivered' })).toBe(true);
    expect(await store.receive('C:SUCCESSFUL', { n: 3 }, lease)).toBe(true);
    expect((await store.list()).map((entry) => entry.key)).toEqual(['A:SUCCESSFUL', 'C:SUCCESSFUL']);
    expect(store.evictions).toBe(1);
    // A copy is kept, not the caller's object.
    const record = { n: 4 };
    await store.receive('D:SUCCESSFUL', record, lease);
    record.n = 5;
    expect((await store.get('D:SUCCESSFUL'))?.record).toEqual({ n: 4 });
  });

  test('replace puts a record in place of the entry only for its lease holder; release with a lease is guarded', async () => {
    const store = new MemoryStore();
    await store.receive('F:SUCCESSFUL', { amount: 1 }, { id: 'held', ms: 60_000 });
    expect(await store.replace('F:SUCCESSFUL', 'other', { amount: 2 }, { id: 'new', ms: 60_000 })).toBe(
      false,
    );
    expect(await store.replace('F:SUCCESSFUL', 'held', { amount: 5 }, { id: 'new', ms: 60_000 })).toBe(true);
    expect(await store.get('F:SUCCESSFUL')).toMatchObject({
      record: { amount: 5 },
      status: 'received',
      attempts: 1,
    });
    store.release('F:SUCCESSFUL', 'held'); // a lost lease deletes nothing
    expect(await store.get('F:SUCCESSFUL')).toBeDefined();
    store.release('F:SUCCESSFUL', 'new');
    expect(await store.get('F:SUCCESSFUL')).toBeUndefined();
  });

  test('a retried delivery carries the same extra fields: the inbox keeps them beside the listed ones', async () => {
    const store = new MemoryStore();
    const { ipn, post } = await start(store);
    const seen: unknown[] = [];
    ipn.on('successful', (n) => {
      seen.push(n.extra);
      if (seen.length === 1) throw new Error('busy');
    });
    const payload = uniquePayload({ currency: 'XOF', transaction_channel: 'wave', note: 'a\u0000b \ud83d' });
    expect((await post(payload)).status).toBe(200);
    await until(() => seen.length === 2, 'the retry');
    const extra = { currency: 'XOF', transaction_channel: 'wave', note: 'a\u0000b \ud83d' };
    expect(seen).toEqual([extra, extra]);
    const stored = await store.get(keyOf(payload));
    expect(stored?.record).toMatchObject(extra);
    expect(stored?.record).not.toHaveProperty('extra');
  });

  test('a lease is exclusive until it runs out, and a settle by a lost lease changes nothing', async () => {
    let now = 1_000_000;
    const store = new MemoryStore({ now: () => now });
    await store.receive('A:SUCCESSFUL', {}, { id: 'first', ms: 100 });
    expect(await store.lease({ id: 'second', ms: 100 }, 10)).toEqual([]);
    now += 101;
    const taken = await store.lease({ id: 'second', ms: 100 }, 10);
    expect(taken).toMatchObject([{ key: 'A:SUCCESSFUL', attempts: 2 }]);
    expect(await store.settle('A:SUCCESSFUL', 'first', { status: 'delivered' })).toBe(false);
    expect(await store.settle('A:SUCCESSFUL', 'second', { status: 'delivered' })).toBe(true);
    expect((await store.get('A:SUCCESSFUL'))?.status).toBe('delivered');
  });
});
