import { randomUUID } from 'node:crypto';
import { format, inspect } from 'node:util';
import express from 'express';
import { Pool } from 'pg';
import { ipnRouter, StoreError } from 'ipn-kit';
import { PostgresStore, postgresSchemaSql } from 'ipn-kit/postgres';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, type Running, postCopies } from '../helpers/servers.js';
import { databaseUrl, describeWithService } from '../helpers/services.js';
import { CLEANUP_TIMEOUT_MS, dropPostgresInboxes } from '../helpers/drop-inboxes.js';

const HOUR = 60 * 60 * 1000;
const lease = (ms = 60_000) => ({ id: randomUUID(), ms });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describeWithService('PostgreSQL', 'PostgresStore', () => {
  // Two pools: two app instances, each with its own connections.
  let poolA: Pool;
  let poolB: Pool;
  const tables: string[] = [];
  const servers: Running[] = [];

  /** A table name no other test (of this file or another, in this process or another) uses. */
  function uniqueTable(): string {
    const table = `ipn_test_pg_${process.pid}_${tables.length}_${randomUUID().slice(0, 8)}`;
    tables.push(table);
    return table;
  }

  /** A store on a new, migrated table. */
  async function freshStore(pool = poolA): Promise<PostgresStore> {
    const store = new PostgresStore({ pool, table: uniqueTable() });
    await store.migrate();
    return store;
  }

  /** Runs SQL on the store's table: for setting times the store would take real time to reach. */
  const sql = (store: PostgresStore, text: string, values: unknown[] = []) =>
    poolA.query(text.replaceAll('$table', `"${store.table}"`), values);

  /** Ends the lease of `key` as if it had run out. */
  const expireLease = (store: PostgresStore, key: string) =>
    sql(store, `UPDATE $table SET lease_until = now() - interval '1 second' WHERE key = $1`, [key]);

  let sequence = 0;
  const uniqueKey = (state = 'SUCCESSFUL') => `TX.${process.pid}.${(sequence += 1)}:${state}`;
  const recordOf = (key: string) => ({
    transaction_id: key.split(':')[0],
    amount: 1000,
    nested: { ok: true },
  });

  beforeAll(() => {
    poolA = new Pool({ connectionString: databaseUrl(), max: 5 });
    poolB = new Pool({ connectionString: databaseUrl(), max: 5 });
    poolA.on('error', () => {});
    poolB.on('error', () => {});
  });

  afterEach(async () => {
    await Promise.all(servers.splice(0).map((server) => server.close()));
  });

  afterAll(async () => {
    await dropPostgresInboxes(poolA, tables);
    await Promise.all([poolA.end(), poolB.end()]);
  }, CLEANUP_TIMEOUT_MS);

  describe('migrate', () => {
    test('creates the table with its columns, and running it again changes nothing', async () => {
      const store = new PostgresStore({ pool: poolA, table: uniqueTable() });

      await store.migrate();
      await store.claim(uniqueKey(), 1000);
      await store.migrate();

      const { rows } = await poolA.query(
        'SELECT column_name FROM information_schema.columns WHERE table_name = $1 ORDER BY ordinal_position',
        [store.table],
      );
      expect(rows.map((row) => row.column_name)).toEqual([
        'key',
        'transaction_id',
        'state',
        'record',
        'status',
        'attempts',
        'last_error',
        'received_at',
        'updated_at',
        'next_attempt_at',
        'delivered_at',
        'lease_id',
        'lease_until',
      ]);
      // The claim is a row of <table>_claims (schema version 7), not an entry of the inbox.
      expect(await store.list()).toHaveLength(0);
      const claims = await poolA.query(`SELECT count(*)::int AS n FROM "${store.table}_claims"`);
      expect(claims.rows[0].n).toBe(1);
    });

    test('run from two pools at once on a new table, succeeds in both', async () => {
      for (let round = 0; round < 5; round += 1) {
        const table = uniqueTable();
        const stores = [new PostgresStore({ pool: poolA, table }), new PostgresStore({ pool: poolB, table })];

        await Promise.all(stores.map((store) => store.migrate()));

        expect(await stores[0]!.claim(uniqueKey(), 1000)).toBe(true);
      }
    });

    test('accepts a schema-qualified table', async () => {
      const store = new PostgresStore({ pool: poolA, table: `public.${uniqueTable()}` });

      await store.migrate();

      expect(await store.claim(uniqueKey(), 1000)).toBe(true);
    });

    test('postgresSchemaSql is the same schema, for your own migrations', async () => {
      const table = uniqueTable();
      await poolA.query(postgresSchemaSql(table));
      await poolA.query(postgresSchemaSql(table)); // idempotent
      const store = new PostgresStore({ pool: poolA, table });

      expect(postgresSchemaSql(table)).toContain(`CREATE TABLE IF NOT EXISTS "${table}"`);
      expect(await store.receive(uniqueKey(), { a: 1 }, lease())).toBe(true);
    });

    test('the table refuses a key that is not transaction_id:state, and an unknown status', async () => {
      const store = await freshStore();
      const insert = (key: string, status: string) =>
        sql(
          store,
          `INSERT INTO $table (key, transaction_id, state, record, status) VALUES ($1, 'TX', 'SUCCESSFUL', '{"n":1}', $2)`,
          [key, status],
        );

      await expect(insert('TX:FAILED', 'received')).rejects.toThrow(/check constraint/);
      await expect(insert('TX:SUCCESSFUL', 'lost')).rejects.toThrow(/check constraint/);
      await insert('TX:SUCCESSFUL', 'received'); // the row itself is one the table takes
    });

    test('a store on a table that was never created says to migrate', async () => {
      const store = new PostgresStore({ pool: poolA, table: uniqueTable() });

      await expect(store.claim(uniqueKey(), 1000)).rejects.toThrow(
        /does not exist: run `await store.migrate\(\)`/,
      );
    });
  });

  describe('as a dedupe store (claim)', () => {
    test('a claim answers true once, then false; its row is in <table>_claims, not in the inbox', async () => {
      const store = await freshStore();
      const key = 'EFB.12:34:SUCCESSFUL'; // the transaction id holds a ':'; the state never does

      expect(await store.claim(key, 1000)).toBe(true);
      expect(await store.claim(key, 1000)).toBe(false);

      expect(await store.get(key)).toBeUndefined();
      const { rows } = await poolA.query(
        `SELECT key, claimed_at IS NOT NULL AS stamped FROM "${store.table}_claims"`,
      );
      expect(rows).toEqual([{ key, stamped: true }]);
    });

    test('the same claim asked twice (its answer was lost) answers true again; another claim answers false', async () => {
      const store = await freshStore();
      const key = uniqueKey();
      expect(await store.claim(key, 1000, 'token-1')).toBe(true);
      expect(await store.claim(key, 1000, 'token-1')).toBe(true);
      expect(await store.claim(key, 1000, 'token-2')).toBe(false);
    });

    test('a key and a token of quotes and backslashes are kept as they are (the claim sends them as literals)', async () => {
      const store = await freshStore();
      const key = `EFB.'; DROP TABLE x; --\\'\\:SUCCESSFUL`;
      const token = `it's a \\ token \\'`;
      expect(await store.claim(key, 1000, token)).toBe(true);
      expect(await store.claim(key, 1000, token)).toBe(true);
      expect(await store.claim(key, 1000, 'another')).toBe(false);
      const { rows } = await poolA.query(`SELECT key, token FROM "${store.table}_claims"`);
      expect(rows).toEqual([{ key, token }]);
      for (const bad of ['', 'a\u0000b', '\ud800', 7 as unknown as string])
        await expect(store.claim(uniqueKey(), 1000, bad)).rejects.toThrow(TypeError);
    });

    test('a claim waits for a write of the inbox in progress at most storeTimeoutMs, then fails (503) and frees its connection', async () => {
      const store = await freshStore();
      store.useStoreTimeout(200);
      const writer = await poolB.connect();
      try {
        await writer.query('BEGIN');
        await writer.query(`LOCK TABLE "${store.table}" IN ROW EXCLUSIVE MODE`); // as a receive holds it
        const key = uniqueKey();
        const claimed = store.claim(key, 1000).then(
          (answer) => answer,
          (error: unknown) => error,
        );
        // The writer ends after 3 s at the latest; the claim must have given up long before.
        const answer = await Promise.race([
          claimed,
          new Promise((resolve) => setTimeout(resolve, 3_000, 'waited')),
        ]);
        expect(answer).toBeInstanceOf(StoreError);
        expect((answer as Error).message).toMatch(/lock timeout/);
        await writer.query('COMMIT');
        expect(await store.claim(key, 1000)).toBe(true);
      } finally {
        await writer.query('ROLLBACK').catch(() => undefined);
        writer.release();
      }
    });

    test('a role with SELECT and INSERT on the inbox is refused the lock of a claim: the error says what it needs', async () => {
      const store = await freshStore();
      const role = `ipn_claim_app_${process.pid}`;
      await poolA.query(`CREATE ROLE ${role} NOLOGIN`);
      const app = new Pool({ connectionString: databaseUrl(), max: 1, options: `-c role=${role}` });
      app.on('error', () => {});
      try {
        await poolA.query(`GRANT SELECT, INSERT ON "${store.table}" TO ${role}`);
        await poolA.query(`GRANT SELECT, INSERT, UPDATE ON "${store.table}_claims" TO ${role}`);
        const claimer = new PostgresStore({ pool: app, table: store.table });
        await expect(claimer.claim(uniqueKey(), 1000)).rejects.toThrow(
          /permission denied for table .*in SHARE mode \(LOCK TABLE\), which needs UPDATE, DELETE or TRUNCATE on it/,
        );
        await poolA.query(`GRANT UPDATE ON "${store.table}" TO ${role}`);
        expect(await claimer.claim(uniqueKey(), 1000)).toBe(true);
      } finally {
        await app.end();
        await poolA.query(`REVOKE ALL ON "${store.table}", "${store.table}_claims" FROM ${role}`);
        await poolA.query(`DROP ROLE ${role}`);
      }
    });

    test('50 concurrent claims of one key from two pools: exactly one answers true', async () => {
      const a = await freshStore();
      const b = new PostgresStore({ pool: poolB, table: a.table });
      const key = uniqueKey();

      const results = await Promise.all(
        Array.from({ length: 50 }, (_, i) => (i % 2 ? a : b).claim(key, 1000)),
      );

      expect(results.filter((result) => result === true)).toHaveLength(1);
      expect(results.filter((result) => result === false)).toHaveLength(49);
    });

    test('release deletes the row, so the next claim succeeds', async () => {
      const store = await freshStore();
      const key = uniqueKey();
      await store.claim(key, 1000);

      await store.release(key);

      expect(await store.get(key)).toBeUndefined();
      expect(await store.claim(key, 1000)).toBe(true);
    });

    test('a key without a state is refused', async () => {
      const store = await freshStore();

      await expect(store.claim('no-colon', 1000)).rejects.toThrow(TypeError);
    });

    test('close leaves the pool open: it is the caller’s', async () => {
      const store = await freshStore();

      store.close();

      expect(await store.claim(uniqueKey(), 1000)).toBe(true);
    });
  });

  describe('as a durable inbox', () => {
    test('receive stores the record leased; receiving the key again answers false and changes nothing', async () => {
      const store = await freshStore();
      const key = uniqueKey();
      const first = lease();

      expect(await store.receive(key, recordOf(key), first)).toBe(true);
      expect(await store.receive(key, { other: true }, lease())).toBe(false);

      const entry = await store.get(key);
      expect(entry).toMatchObject({
        status: 'received',
        attempts: 1,
        record: recordOf(key),
        lastError: null,
      });
      expect(entry!.leaseUntil!.getTime()).toBeGreaterThan(entry!.receivedAt.getTime());
      expect(await store.lease(lease(), 10)).toEqual([]); // still leased by the receive
    });

    test('replace swaps the record held by a lease for another in one statement, due and leased anew', async () => {
      const store = await freshStore();
      const key = uniqueKey();
      const forged = lease();
      await store.receive(key, { ...recordOf(key), amount: 1 }, forged);
      await sql(store, `UPDATE $table SET attempts = 3, last_error = 'x' WHERE key = $1`, [key]);
      const next = lease();

      expect(await store.replace(key, 'another-lease', recordOf(key), next)).toBe(false);
      expect((await store.get(key))?.record).toMatchObject({ amount: 1 });
      expect(await store.replace(key, forged.id, recordOf(key), next)).toBe(true);

      expect(await store.get(key)).toMatchObject({
        record: recordOf(key),
        status: 'received',
        attempts: 1,
        lastError: null,
      });
      // Held by the new lease: the old one can no longer settle it, the new one can.
      expect(await store.settle(key, forged.id, { status: 'delivered' })).toBe(false);
      expect(await store.settle(key, next.id, { status: 'delivered' })).toBe(true);
    });

    test('release with a lease deletes the entry only while that lease holds it', async () => {
      const store = await freshStore();
      const key = uniqueKey();
      const held = lease();
      await store.receive(key, recordOf(key), held);

      await store.release(key, 'a-lost-lease');
      expect(await store.get(key)).toBeDefined();
      await store.release(key, held.id);
      expect(await store.get(key)).toBeUndefined();

      await store.receive(key, recordOf(key), lease());
      await store.release(key); // without a lease, as at-most-once: whatever holds it
      expect(await store.get(key)).toBeUndefined();
    });

    test.each([
      ['a NUL', 'order\u0000-7'],
      ['a lone surrogate (half an emoji)', 'Awa \ud83d'],
      ['a lone low surrogate and a whole emoji', '\ude00 \ud83d\ude00'],
    ])('a record holding %s in a string round-trips exactly, and stays searchable', async (_what, text) => {
      const store = await freshStore();
      const key = uniqueKey();
      const record = { ...recordOf(key), custom_data: `order ${text}`, [`k${text}`]: [text, { text }] };

      expect(await store.receive(key, record, lease())).toBe(true);

      expect((await store.get(key))?.record).toEqual(record);
      expect((await store.list({ customDataContains: 'ORDER' })).map((e) => e.key)).toEqual([key]);
    });

    // Under REPEATABLE READ a receive takes its lock first, in a simple query: its values go as literals.
    const repeatable = '-c default_transaction_isolation=repeatable\\ read';
    test.each([
      ['under READ COMMITTED', {}],
      ['under REPEATABLE READ (as literals)', { options: repeatable }],
      [
        'under REPEATABLE READ, standard_conforming_strings off',
        { options: `${repeatable} -c standard_conforming_strings=off` },
      ],
    ])(
      'keys and records of quotes, backslashes, $1 and ? are kept as they are, alone and in a batch, %s',
      async (_what, settings) => {
        const store = await freshStore();
        const pool = new Pool({ connectionString: databaseUrl(), max: 2, ...settings });
        pool.on('error', () => {});
        try {
          const receiver = new PostgresStore({ pool, table: store.table });
          const keys = [1, 2, 3, 4, 5].map((n) => `EFB.'; --\\'\\\\${n}$1?:SUCCESSFUL`);
          const recordWith = (key: string) => ({
            transaction_id: key.slice(0, key.lastIndexOf(':')),
            custom_data: `it's \\ $1 ? E'\\x41' \u0000 \ud83d ${'🙂'}`,
            nested: { quote: "'", backslash: '\\', dollar: '$2::text' },
          });
          // At once: the first two go alone, the rest as one batch (receiveMany).
          const answers = await Promise.all(
            keys.map((key) => receiver.receive(key, recordWith(key), lease())),
          );
          expect(answers).toEqual(keys.map(() => true));
          for (const key of keys) expect((await store.get(key))?.record).toEqual(recordWith(key));
        } finally {
          await pool.end();
        }
      },
    );

    test('a role with SELECT and INSERT on the inbox and SELECT on its claims receives under REPEATABLE READ: the lock a receive takes first asks no more', async () => {
      const store = await freshStore();
      const role = `ipn_receive_app_${process.pid}`;
      await poolA.query(`CREATE ROLE ${role} NOLOGIN`);
      const options = `-c role=${role} ${repeatable}`;
      const app = new Pool({ connectionString: databaseUrl(), max: 2, options });
      app.on('error', () => {});
      try {
        await poolA.query(`GRANT SELECT, INSERT ON "${store.table}" TO ${role}`);
        await poolA.query(`GRANT SELECT ON "${store.table}_claims" TO ${role}`);
        const receiver = new PostgresStore({ pool: app, table: store.table });
        const keys = [uniqueKey(), uniqueKey(), uniqueKey()];
        expect(await Promise.all(keys.map((key) => receiver.receive(key, recordOf(key), lease())))).toEqual([
          true,
          true,
          true,
        ]);
      } finally {
        await app.end();
        await poolA.query(`REVOKE ALL ON "${store.table}", "${store.table}_claims" FROM ${role}`);
        await poolA.query(`DROP ROLE ${role}`);
      }
    });

    // A guarded receive that is not READ COMMITTED fails with division_by_zero, and goes again after its
    // lock. The same code from elsewhere (a partner's trigger) is never read as a receive done: it goes
    // again the same way, fails the same way, and the receive is refused (503, resent).
    test('a division by zero of a trigger on the inbox fails the receive (READ COMMITTED, alone and in a batch), and stores nothing', async () => {
      const store = await freshStore();
      await poolA.query(
        `CREATE FUNCTION "${store.table}_divide"() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN IF NEW.transaction_id LIKE 'DIV.%' THEN PERFORM 1 / 0; END IF; RETURN NEW; END $$`,
      );
      await poolA.query(
        `CREATE TRIGGER divide BEFORE INSERT ON "${store.table}" FOR EACH ROW EXECUTE FUNCTION "${store.table}_divide"()`,
      );
      try {
        const [alone, ...batch] = ['DIV.1:SUCCESSFUL', 'DIV.2:SUCCESSFUL', 'DIV.3:SUCCESSFUL'];
        await expect(store.receive(alone, recordOf(alone), lease())).rejects.toBeInstanceOf(StoreError);
        const answers = await Promise.allSettled(
          batch.map((key) => store.receive(key, recordOf(key), lease())),
        );
        expect(answers.map((answer) => answer.status)).toEqual(['rejected', 'rejected']);
        for (const key of [alone, ...batch]) expect(await store.get(key)).toBeUndefined();
        const key = uniqueKey();
        expect(await store.receive(key, recordOf(key), lease())).toBe(true);
      } finally {
        await poolA.query(`DROP FUNCTION "${store.table}_divide"() CASCADE`);
      }
    });

    test('a stored record that only looks like an escaped one is read as itself', async () => {
      const store = await freshStore();
      const key = uniqueKey();
      // A notification always has transaction_id: a record with other keys is never taken for the wrapper.
      const record = { ...recordOf(key), 'ipn-kit:json': '{"a":1}' };
      await store.receive(key, record, lease());
      expect((await store.get(key))?.record).toEqual(record);
    });

    test.each([
      ['a NUL', '\\u0000'],
      ['a lone surrogate', '\\ud83d'],
    ])(
      'at least once, a notification with %s in its text fields is answered 200 and delivered once with the exact strings',
      async (_what, escape) => {
        const store = await freshStore();
        const ipn = ipnRouter({ store, delivery: 'at-least-once', logger: quiet });
        const received: Array<Record<string, unknown>> = [];
        ipn.on('successful', (n) => void received.push({ ...n }));
        const running = await listen(ipn);
        servers.push(running);
        const payload = uniquePayload({ custom_data: 'order-1', customer_name: 'Awa' });
        // Written by hand: JSON.parse accepts the escape, and so must the inbox.
        const body = JSON.stringify(payload)
          .replace('"order-1"', `"order${escape}-1"`)
          .replace('"Awa"', `"Awa ${escape}"`);
        const post = () =>
          fetch(running.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });

        expect((await post()).status).toBe(200);
        expect(await (await post()).json()).toEqual({ ok: true, duplicate: true });
        const exact = JSON.parse(body) as Record<string, unknown>;
        const key = `${String(payload.transaction_id)}:SUCCESSFUL`;
        for (let tries = 0; (await store.get(key))?.status !== 'delivered' && tries < 500; tries += 1)
          await sleep(10);
        // Delivered: every listener succeeded once, and nothing takes a delivered entry up again.
        expect(received).toHaveLength(1);
        expect(received[0]).toMatchObject({
          custom_data: exact.custom_data,
          customer_name: exact.customer_name,
        });
        expect((await store.get(key))?.status).toBe('delivered');
        await ipn.close();
      },
    );

    test('lease takes due entries whose lease ran out, oldest first, and counts an attempt', async () => {
      const store = await freshStore();
      const keys = [uniqueKey(), uniqueKey(), uniqueKey()];
      for (const key of keys) await store.receive(key, recordOf(key), lease());
      await expireLease(store, keys[0]!);
      await expireLease(store, keys[2]!);
      const taken = lease();

      const entries = await store.lease(taken, 10);

      expect(entries.map((entry) => entry.key)).toEqual([keys[0], keys[2]]);
      expect(entries.map((entry) => entry.attempts)).toEqual([2, 2]);
      expect(entries[0]!.record).toEqual(recordOf(keys[0]!));
      expect(entries[0]!.leaseUntil).toBeInstanceOf(Date);
      expect(await store.lease(lease(), 10)).toEqual([]);
    });

    test('lease takes at most limit entries', async () => {
      const store = await freshStore();
      for (let i = 0; i < 5; i += 1) {
        const key = uniqueKey();
        await store.receive(key, recordOf(key), lease());
        await expireLease(store, key);
      }

      expect(await store.lease(lease(), 2)).toHaveLength(2);
      expect(await store.lease(lease(), 0)).toEqual([]);
      expect(await store.lease(lease(), 10)).toHaveLength(3);
    });

    test('concurrent leases from two pools never return the same key', async () => {
      const a = await freshStore();
      const b = new PostgresStore({ pool: poolB, table: a.table });
      const keys = Array.from({ length: 40 }, () => uniqueKey());
      for (const key of keys) await a.receive(key, recordOf(key), lease());
      await sql(a, `UPDATE $table SET lease_until = now() - interval '1 second'`);

      const batches = await Promise.all(
        Array.from({ length: 6 }, (_, i) => (i % 2 ? a : b).lease(lease(), 10)),
      );

      const leased = batches.flat().map((entry) => entry.key);
      expect(new Set(leased).size).toBe(leased.length);
      expect(leased.sort()).toEqual([...keys].sort());
    });

    test('a lease that ran out is taken again, with one more attempt', async () => {
      const store = await freshStore();
      const key = uniqueKey();
      await store.receive(key, recordOf(key), lease(1));
      await sleep(20); // the database's clock passes the 1 ms lease

      const [again] = await store.lease(lease(), 10);
      expect(again).toMatchObject({ key, attempts: 2 });

      await expireLease(store, key);
      const [third] = await store.lease(lease(), 10);
      expect(third).toMatchObject({ key, attempts: 3 });
    });

    test('settle with a lease that was lost answers false and changes nothing', async () => {
      const store = await freshStore();
      const key = uniqueKey();
      const stale = lease();
      await store.receive(key, recordOf(key), stale);
      await expireLease(store, key);
      const [current] = await store.lease(lease(), 10);

      expect(await store.settle(key, stale.id, { status: 'delivered' })).toBe(false);
      expect(await store.get(key)).toMatchObject({ status: 'received', attempts: 2, deliveredAt: null });
      expect(current).toBeDefined();
    });

    test('settle delivered: marked delivered, lease cleared, never leased again', async () => {
      const store = await freshStore();
      const key = uniqueKey();
      const held = lease();
      await store.receive(key, recordOf(key), held);

      expect(await store.settle(key, held.id, { status: 'delivered' })).toBe(true);

      const entry = await store.get(key);
      expect(entry).toMatchObject({ status: 'delivered', leaseUntil: null, deliveredAt: expect.any(Date) });
      await expireLease(store, key);
      expect(await store.lease(lease(), 10)).toEqual([]);
      expect(await store.settle(key, held.id, { status: 'delivered' })).toBe(false); // the lease is gone
    });

    test('settle failed: kept with its error, and leased again only once it is due', async () => {
      const store = await freshStore();
      const key = uniqueKey();
      const held = lease();
      await store.receive(key, recordOf(key), held);
      const nextAttemptAt = new Date(Date.now() + HOUR);

      expect(
        await store.settle(key, held.id, { status: 'failed', error: 'listener threw', nextAttemptAt }),
      ).toBe(true);

      const entry = await store.get(key);
      expect(entry).toMatchObject({ status: 'failed', lastError: 'listener threw', leaseUntil: null });
      expect(entry!.nextAttemptAt.getTime()).toBe(nextAttemptAt.getTime());
      expect(await store.lease(lease(), 10)).toEqual([]); // not due yet

      await sql(store, `UPDATE $table SET next_attempt_at = now() - interval '1 second' WHERE key = $1`, [
        key,
      ]);
      const [due] = await store.lease(lease(), 10);
      expect(due).toMatchObject({ key, status: 'failed', attempts: 2, lastError: 'listener threw' });
    });

    test('settle dead: never leased again, until replayed', async () => {
      const store = await freshStore();
      const key = uniqueKey();
      const held = lease();
      await store.receive(key, recordOf(key), held);

      expect(await store.settle(key, held.id, { status: 'dead', error: 'gave up' })).toBe(true);

      expect(await store.get(key)).toMatchObject({ status: 'dead', lastError: 'gave up', leaseUntil: null });
      expect(await store.lease(lease(), 10)).toEqual([]);
    });

    test('replayDead makes every dead entry due now, attempts reset, error kept; it counts them', async () => {
      const store = await freshStore();
      const dead = [uniqueKey(), uniqueKey()];
      for (const key of dead) {
        const held = lease();
        await store.receive(key, recordOf(key), held);
        await store.settle(key, held.id, { status: 'dead', error: 'gave up' });
      }
      const alive = uniqueKey();
      await store.receive(alive, recordOf(alive), lease());

      expect(await store.replayDead()).toBe(2);

      const entries = await store.lease(lease(), 10);
      expect(entries.map((entry) => entry.key)).toEqual(dead);
      expect(entries.map((entry) => [entry.status, entry.attempts, entry.lastError])).toEqual([
        ['received', 1, 'gave up'],
        ['received', 1, 'gave up'],
      ]);
      expect(await store.replayDead()).toBe(0);
    });

    test('replay makes one entry of any status due now, attempts reset; false for a missing key', async () => {
      const store = await freshStore();
      const key = uniqueKey();
      const held = lease();
      await store.receive(key, recordOf(key), held);
      await store.settle(key, held.id, {
        status: 'failed',
        error: 'boom',
        nextAttemptAt: new Date(Date.now() + HOUR),
      });

      expect(await store.replay(key)).toBe(true);
      expect(await store.replay(uniqueKey())).toBe(false);

      expect(await store.get(key)).toMatchObject({
        status: 'received',
        attempts: 0,
        lastError: 'boom',
        leaseUntil: null,
      });
      const [due] = await store.lease(lease(), 10);
      expect(due).toMatchObject({ key, attempts: 1 });
      expect(await store.settle(key, held.id, { status: 'delivered' })).toBe(false); // the old lease is gone
    });

    test('replay keeps a live lease: the attempt holding it finishes alone, and a claim row is not replayed', async () => {
      const store = await freshStore();
      const key = uniqueKey();
      const held = lease();
      await store.receive(key, recordOf(key), held); // an attempt is running

      expect(await store.replay(key)).toBe(true);
      expect(await store.lease(lease(), 10)).toEqual([]); // nobody else takes it meanwhile
      expect(await store.settle(key, held.id, { status: 'delivered' })).toBe(true);

      const claimed = uniqueKey();
      await store.claim(claimed, 1000);
      expect(await store.replay(claimed)).toBe(false);
      expect(await store.get(claimed)).toBeUndefined();
      expect(await store.claim(claimed, 1000)).toBe(false); // still claimed
    });

    test('list filters by status and pages, oldest first', async () => {
      const store = await freshStore();
      const keys = Array.from({ length: 5 }, () => uniqueKey());
      for (const [index, key] of keys.entries()) {
        const held = lease();
        await store.receive(key, recordOf(key), held);
        if (index % 2 === 1) await store.settle(key, held.id, { status: 'dead', error: 'gave up' });
      }

      expect((await store.list()).map((entry) => entry.key)).toEqual(keys);
      expect((await store.list({ status: 'dead' })).map((entry) => entry.key)).toEqual([keys[1], keys[3]]);
      expect(
        (await store.list({ status: 'received', limit: 1, offset: 1 })).map((entry) => entry.key),
      ).toEqual([keys[2]]);
      expect((await store.list({ limit: 2, offset: 3 })).map((entry) => entry.key)).toEqual([
        keys[3],
        keys[4],
      ]);
      expect(await store.list({ status: 'delivered' })).toEqual([]);
      await expect(store.list({ status: 'lost' as any })).rejects.toThrow(TypeError);
      await expect(store.list({ limit: -1 })).rejects.toThrow(TypeError);
    });

    test('list filters by transaction, text in custom_data and dates, newest first on request; countByStatus counts', async () => {
      const store = await freshStore();
      const keys = Array.from({ length: 4 }, () => uniqueKey());
      for (const [index, key] of keys.entries()) {
        const held = lease();
        await store.receive(key, { ...recordOf(key), custom_data: `Order-${index}` }, held);
        if (index === 3) await store.settle(key, held.id, { status: 'dead', error: 'gave up' });
      }
      // Received an hour apart, oldest first: keys[0] three hours ago ... keys[3] now.
      for (const [index, key] of keys.entries()) {
        await sql(
          store,
          `UPDATE $table SET received_at = now() - make_interval(hours => $2) WHERE key = $1`,
          [key, 3 - index],
        );
      }
      const keysOf = (entries: Array<{ key: string }>) => entries.map((entry) => entry.key);
      const idOf = (key: string) => key.split(':')[0] as string;

      expect(keysOf(await store.list({ transactionId: idOf(keys[2] as string) }))).toEqual([keys[2]]);
      expect(keysOf(await store.list({ customDataContains: 'order-1' }))).toEqual([keys[1]]);
      expect(keysOf(await store.list({ customDataContains: '%' }))).toEqual([]);
      expect(keysOf(await store.list({ order: 'newest' }))).toEqual([...keys].reverse());
      const twoHoursAgo = new Date(Date.now() - 2 * 60 * 60 * 1000 - 60_000);
      const anHourAgo = new Date(Date.now() - 60 * 60 * 1000 + 60_000);
      expect(keysOf(await store.list({ receivedFrom: twoHoursAgo, receivedBefore: anHourAgo }))).toEqual([
        keys[1],
        keys[2],
      ]);
      expect(await store.countByStatus()).toEqual({ received: 3, delivered: 0, failed: 0, dead: 1 });
      expect(await store.countByStatus(anHourAgo)).toEqual({ received: 0, delivered: 0, failed: 0, dead: 1 });
      await expect(store.list({ order: 'random' as any })).rejects.toThrow(TypeError);
    });

    test('get returns the whole entry, with dates as Date; undefined when missing', async () => {
      const store = await freshStore();
      const key = uniqueKey('FAILED');
      await store.receive(key, recordOf(key), lease());

      const entry = await store.get(key);

      expect(entry).toEqual({
        key,
        transactionId: key.split(':')[0],
        state: 'FAILED',
        record: recordOf(key),
        status: 'received',
        attempts: 1,
        lastError: null,
        receivedAt: expect.any(Date),
        updatedAt: expect.any(Date),
        nextAttemptAt: expect.any(Date),
        deliveredAt: null,
        leaseUntil: expect.any(Date),
      });
      expect(await store.get(uniqueKey())).toBeUndefined();
    });

    test('purge deletes delivered entries delivered before the date, and nothing else', async () => {
      const store = await freshStore();
      const [old, recent, pending, dead] = [uniqueKey(), uniqueKey(), uniqueKey(), uniqueKey()];
      for (const key of [old, recent, pending, dead]) {
        const held = lease();
        await store.receive(key, recordOf(key), held);
        if (key === old || key === recent) await store.settle(key, held.id, { status: 'delivered' });
        if (key === dead) await store.settle(key, held.id, { status: 'dead', error: 'gave up' });
      }
      await sql(store, `UPDATE $table SET delivered_at = now() - interval '2 days' WHERE key = $1`, [old]);
      await sql(store, `UPDATE $table SET received_at = now() - interval '3 days' WHERE key = $1`, [pending]);

      expect(await store.purge(new Date(Date.now() - 24 * HOUR))).toBe(1);

      expect(await store.get(old)).toBeUndefined();
      expect((await store.list()).map((entry) => entry.key).sort()).toEqual([recent, pending, dead].sort());
      // Its resend is now a first delivery again.
      expect(await store.receive(old, recordOf(old), lease())).toBe(true);
      await expect(store.purge(new Date('nope'))).rejects.toThrow(TypeError);
    });
  });

  test.each([
    ['the default logger', undefined],
    ['a pino-style logger', 'custom'],
  ])(
    "a PostgreSQL error quoting the record puts neither the customer's number nor name in the log (%s)",
    async (_name, kind) => {
      const store = await freshStore();
      // A check of the partner's own that refuses the row, quoting it in its message and its detail, as
      // PostgreSQL's own errors do ("Failing row contains (...)", "Key (...)=(...) already exists").
      const fn = `${store.table}_refuse`;
      await poolA.query(`CREATE FUNCTION "${fn}"() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'too_big: refused for %', NEW.record->>'customer_name'
          USING DETAIL = 'Failing row contains ' || NEW.record::text; END $$`);
      await sql(
        store,
        `CREATE TRIGGER refuse BEFORE INSERT ON $table FOR EACH ROW EXECUTE FUNCTION "${fn}"()`,
      );
      const lines: string[] = [];
      const spy = jest.spyOn(console, 'error').mockImplementation((...args: unknown[]) => {
        lines.push(format(...args));
      });
      const capture = (object: Record<string, unknown>, message: string) =>
        void lines.push(`${message} ${inspect(object, { depth: 10 })}`);
      const logger = kind === 'custom' ? { ...quiet, error: capture, warn: capture } : undefined;
      try {
        const ipn = ipnRouter({ store, delivery: 'at-least-once', logger });
        // No `error` listener: an app with one owns its errors, and ipn-kit's own line goes to debug.
        const running = await listen(ipn);
        servers.push(running);
        const payload = uniquePayload({ destination: '221770001122', customer_name: 'Awa Ndiaye' });
        const response = await fetch(running.url, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(payload),
        });
        expect(response.status).toBe(503);
        for (let tries = 0; !lines.join('').includes('too_big') && tries < 200; tries += 1) await sleep(10);

        const log = lines.join('\n');
        expect(log).toContain('too_big');
        expect(log).toContain('Failing row contains'); // the detail is kept, scrubbed
        expect(log).toContain('[redacted]');
        expect(log).not.toContain('221770001122');
        expect(log).not.toContain('Awa Ndiaye');
        // The error event still carries the driver's error, untouched, for the partner's own handling.
        const errors: unknown[] = [];
        ipn.on('error', ({ error }) => void errors.push(error));
        const again = await fetch(running.url, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(uniquePayload({ destination: '221770001122', customer_name: 'Awa Ndiaye' })),
        });
        expect(again.status).toBe(503);
        for (let tries = 0; errors.length === 0 && tries < 200; tries += 1) await sleep(10);
        await ipn.close();
        expect(String((errors[0] as { cause: { detail?: string } }).cause.detail)).toContain('Awa Ndiaye');
      } finally {
        spy.mockRestore();
        await poolA.query(`DROP FUNCTION IF EXISTS "${fn}" CASCADE`);
      }
    },
  );

  test('two app instances sharing the table deliver 20 concurrent copies exactly once, and record the key', async () => {
    const table = (await freshStore()).table;
    async function instance(pool: Pool) {
      const ipn = ipnRouter({ store: new PostgresStore({ pool, table }), logger: quiet });
      const app = express();
      app.use('/ipn', ipn);
      const running = await listen(app);
      servers.push(running);
      return { recorder: recordEvents(ipn), url: running.url };
    }
    const a = await instance(poolA);
    const b = await instance(poolB);
    const payload = uniquePayload();

    const statuses = await postCopies([b.url, a.url], payload, 20);

    expect(statuses).toEqual(Array(20).fill(200));
    expect(a.recorder.count('successful') + b.recorder.count('successful')).toBe(1);
    expect(a.recorder.count('duplicate') + b.recorder.count('duplicate')).toBe(19);
    const { rows } = await poolA.query(`SELECT key FROM "${table}_claims"`);
    expect(rows).toEqual([{ key: `${String(payload.transaction_id)}:SUCCESSFUL` }]);
  });
});

describe('PostgresStore construction', () => {
  const pool = { query: () => Promise.resolve({ rows: [], rowCount: 0 }) };

  test.each([
    'bad-name',
    'a.b.c',
    '"quoted"',
    '',
    '1table',
    'inbox; DROP TABLE users',
    'schema.',
    'x'.repeat(64),
  ])('throws a TypeError for the table name %j', (table) => {
    expect(() => new PostgresStore({ pool, table })).toThrow(TypeError);
    expect(() => postgresSchemaSql(table)).toThrow(TypeError);
  });

  test.each(['ipn_inbox', 'app.ipn_inbox', 'Inbox2', '_x', 'x'.repeat(63)])(
    'accepts the table name %j',
    (table) => {
      expect(new PostgresStore({ pool, table }).table).toBe(table);
    },
  );

  test("the table defaults to 'ipn_inbox', and the store says it is durable", () => {
    const store = new PostgresStore({ pool });
    expect(store.table).toBe('ipn_inbox');
    expect(store.durable).toBe(true);
  });

  test.each([
    ['no options', undefined],
    ['no pool', {}],
    ['a pool without query()', { pool: { connect: () => {} } }],
    ['a connection string instead of a pool', { pool: 'postgres://localhost/db' }],
  ])('throws a TypeError for %s', (_case, options) => {
    expect(() => new PostgresStore(options as any)).toThrow(/pool must be a pg Pool/);
  });

  test.each([true, false, { size: 8, lanes: 1 }])(
    'refuses the removed groupDeliveries (%j), saying to remove it, rather than ignore it',
    (groupDeliveries) => {
      const construct = () => new PostgresStore({ pool, groupDeliveries } as any);
      expect(construct).toThrow(TypeError);
      expect(construct).toThrow(/^PostgresStore: groupDeliveries was removed .*: remove the option$/);
    },
  );

  test('accepts groupDeliveries: undefined (an option spread in only when set)', () => {
    expect(new PostgresStore({ pool, groupDeliveries: undefined } as any).table).toBe('ipn_inbox');
  });
});
