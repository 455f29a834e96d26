import { randomUUID } from 'node:crypto';
import { Pool } from 'pg';
import { PostgresStore, type PgQueryable } from 'ipn-kit/postgres';
import { databaseUrl, describeWithService } from '../helpers/services.js';

/**
 * Hostile review of the group commit (002c824, 6e574f0): receives and `delivered` settlements batched into
 * one statement. Store level, against a real PostgreSQL. Each batch is forced by a first call that goes alone
 * (nothing in flight), the others queueing behind it and going together as the next batch.
 */
describeWithService('PostgreSQL', 'PostgresStore group commit (review)', () => {
  let pool: Pool;
  const tables: string[] = [];
  beforeAll(() => {
    pool = new Pool({ connectionString: databaseUrl(), max: 8 });
    pool.on('error', () => {});
  });
  afterAll(async () => {
    for (const table of tables) await pool.query(`DROP TABLE IF EXISTS "${table}", "${table}_expected"`);
    await pool.end();
  });

  async function fresh(over: PgQueryable = pool) {
    const table = `ipn_gcr_${process.pid}_${randomUUID().slice(0, 8)}`;
    tables.push(table);
    const statements: string[] = [];
    const counted: PgQueryable = {
      query: (text, values) => {
        statements.push(text);
        return over.query(text, values);
      },
    };
    const store = new PostgresStore({ pool: counted, table });
    await store.migrate();
    const combined = () => statements.filter((text) => text.includes('WITH received AS')).length;
    return { store, table, statements, combined };
  }
  const lease = (id: string = randomUUID()) => ({ id, ms: 60_000 });
  /** A call that goes alone, so that the calls made right after it queue and go as one batch. */
  const opener = (store: PostgresStore, tag: string) =>
    store.receive(`OPEN.${tag}.${randomUUID().slice(0, 8)}:SUCCESSFUL`, {}, lease());

  describe('result mapping in the combined statement (these hold)', () => {
    test('a key received and settled in one batch: the receive stores it, the settlement does not count', async () => {
      const { store, combined } = await fresh();
      const own = lease();
      const results = await Promise.all([
        opener(store, 'a'),
        store.receive('NEW.1:SUCCESSFUL', { n: 1 }, own),
        store.settle('NEW.1:SUCCESSFUL', own.id, { status: 'delivered' }),
      ]);
      expect(combined()).toBe(1);
      expect(results.slice(1)).toEqual([true, false]);
      expect((await store.get('NEW.1:SUCCESSFUL'))?.status).toBe('received');
    });

    test('a key received twice plus its own settlement, ids with ":" inside, and a fresh key twice', async () => {
      const { store, combined } = await fresh();
      const held = lease();
      await store.receive('A:B:C.1:SUCCESSFUL', { held: true }, held);
      const results = await Promise.all([
        opener(store, 'b'),
        store.receive('A:B:C.1:SUCCESSFUL', { copy: 1 }, lease()),
        store.receive('A:B:C.1:SUCCESSFUL', { copy: 2 }, lease()),
        store.settle('A:B:C.1:SUCCESSFUL', held.id, { status: 'delivered' }),
        store.receive('X:Y.2:FAILED', { copy: 1 }, lease()),
        store.receive('X:Y.2:FAILED', { copy: 2 }, lease()),
        store.settle('X:Y.2:FAILED', randomUUID(), { status: 'delivered' }),
        store.settle('A:B:C.1:SUCCESSFUL', randomUUID(), { status: 'delivered' }),
      ]);
      expect(combined()).toBe(1);
      expect(results.slice(1)).toEqual([false, false, true, true, false, false, false]);
      const a = await store.get('A:B:C.1:SUCCESSFUL');
      expect(a).toMatchObject({ status: 'delivered', transactionId: 'A:B:C.1', state: 'SUCCESSFUL' });
      expect(a?.record).toEqual({ held: true });
      expect(await store.get('X:Y.2:FAILED')).toMatchObject({ status: 'received', record: { copy: 1 } });
    });

    test('more than maxBatch (500) receives and settlements at once: each told its own outcome', async () => {
      const { store } = await fresh();
      const held = Array.from({ length: 300 }, (_, i) => ({ key: `H.${i}:SUCCESSFUL`, lease: lease() }));
      await Promise.all(held.map(({ key, lease: own }) => store.receive(key, { key }, own)));
      const fresh700 = Array.from({ length: 700 }, (_, i) => `F.${i}:SUCCESSFUL`);
      const calls: Array<Promise<boolean>> = [opener(store, 'c')];
      const expected: boolean[] = [];
      fresh700.forEach((key, i) => {
        calls.push(store.receive(key, { key }, lease()));
        expected.push(true);
        if (i < held.length) {
          const wrong = i % 7 === 0;
          calls.push(
            store.settle(held[i]!.key, wrong ? randomUUID() : held[i]!.lease.id, { status: 'delivered' }),
          );
          expected.push(!wrong);
          calls.push(store.receive(held[i]!.key, {}, lease())); // a resend of a stored one
          expected.push(false);
        }
      });
      const results = await Promise.all(calls);
      expect(results.slice(1)).toEqual(expected);
      const counts = await store.countByStatus();
      expect(counts.delivered).toBe(held.filter((_, i) => i % 7 !== 0).length);
      expect(counts.received).toBe(1 + 700 + held.filter((_, i) => i % 7 === 0).length);
    });

    test('records with NUL and lone surrogates, in the combined statement, round-trip exactly', async () => {
      const { store, combined } = await fresh();
      const held = lease();
      await store.receive('HELD.1:SUCCESSFUL', {}, held);
      const odd = {
        nul: 'a\u0000b',
        half: 'x\ud83dy',
        '\u0000key': 'v',
        quote: '"{},\\',
        nested: ['\udc00', { deep: 'z\u0000' }],
      };
      const results = await Promise.all([
        opener(store, 'd'),
        store.receive('ODD.1:SUCCESSFUL', odd, lease()),
        store.settle('HELD.1:SUCCESSFUL', held.id, { status: 'delivered' }),
        store.receive('ODD.2:SUCCESSFUL', { plain: '{"a":1}' }, lease()),
      ]);
      expect(combined()).toBe(1);
      expect(results.slice(1)).toEqual([true, true, true]);
      expect((await store.get('ODD.1:SUCCESSFUL'))?.record).toEqual(odd);
      expect((await store.get('ODD.2:SUCCESSFUL'))?.record).toEqual({ plain: '{"a":1}' });
    });
  });

  describe('keys a text column cannot hold exactly (store API; the router refuses such ids)', () => {
    test('a key with a lone surrogate is refused with a TypeError, alone or batched; the others are stored', async () => {
      const { store, table } = await fresh();
      await expect(store.receive('LONE\ud800.0:SUCCESSFUL', {}, lease())).rejects.toThrow(
        /a key cannot hold a NUL character or a lone surrogate/,
      );
      const outcomes = await Promise.allSettled([
        opener(store, 'e'),
        store.receive('LONE\ud800.1:SUCCESSFUL', {}, lease()),
        store.receive('PLAIN.1:SUCCESSFUL', {}, lease()),
      ]);
      expect(outcomes.map((outcome) => outcome.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
      const { rows } = await pool.query(`SELECT count(*)::int AS n FROM "${table}" WHERE key LIKE 'LONE%'`);
      expect(rows[0].n).toBe(0); // never stored as another key
    });

    test('a settlement of a key with a lone surrogate is refused, and the others batched with it settle', async () => {
      const { store } = await fresh();
      const own = lease();
      expect(await store.receive('PLAIN.2:SUCCESSFUL', {}, own)).toBe(true);
      const outcomes = await Promise.allSettled([
        opener(store, 'f'),
        store.settle('LONE\udfff.2:SUCCESSFUL', own.id, { status: 'delivered' }),
        store.settle('PLAIN.2:SUCCESSFUL', own.id, { status: 'delivered' }),
      ]);
      expect(outcomes.map((outcome) => outcome.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
      expect((await store.get('PLAIN.2:SUCCESSFUL'))?.status).toBe('delivered');
    });

    test('one key with a NUL fails only its own receive, not the unrelated receives batched with it', async () => {
      const { store } = await fresh();
      const outcomes = await Promise.allSettled([
        opener(store, 'g'),
        store.receive('NUL\u0000.1:SUCCESSFUL', {}, lease()),
        store.receive('INNOCENT.1:SUCCESSFUL', {}, lease()),
        store.receive('INNOCENT.2:SUCCESSFUL', {}, lease()),
      ]);
      expect(outcomes[1].status).toBe('rejected');
      expect(outcomes.slice(2).map((o) => o.status)).toEqual(['fulfilled', 'fulfilled']);
    });
  });
  describe('two instances on one table (the documented multi-instance setup)', () => {
    test('overlapping resends batched in opposite orders by two instances: no batch fails (deadlock)', async () => {
      // The service resends a burst to another instance (a 503, a timeout, a load balancer): each instance
      // batches the same keys, in the order their requests came. One statement per receive cannot deadlock;
      // one INSERT of many rows waits on the other's uncommitted keys while that one waits on its own.
      const { store: first, table } = await fresh();
      const other = new Pool({ connectionString: databaseUrl(), max: 4 });
      other.on('error', () => {});
      try {
        const second = new PostgresStore({ pool: other, table });
        const failures: unknown[] = [];
        let stored = 0;
        for (let round = 0; round < 6 && failures.length === 0; round += 1) {
          const keys = Array.from({ length: 400 }, (_, i) => `DL.${round}.${i}:SUCCESSFUL`);
          const burst = (store: PostgresStore, order: string[], tag: string) => [
            opener(store, tag),
            ...order.map((key) => store.receive(key, { key }, lease())),
          ];
          const outcomes = await Promise.allSettled([
            ...burst(first, keys, `x${round}`),
            ...burst(second, [...keys].reverse(), `y${round}`),
          ]);
          for (const outcome of outcomes) {
            if (outcome.status === 'rejected') failures.push(outcome.reason);
            else if (outcome.value) stored += 1;
          }
        }
        const messages = [...new Set(failures.map((f) => String((f as Error).message ?? f)))];
        expect({ failed: failures.length, messages }).toEqual({ failed: 0, messages: [] });
        expect(stored).toBeGreaterThan(0);
      } finally {
        await other.end();
      }
    }, 60_000);
  });
});
