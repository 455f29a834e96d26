import { fork, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { ipnRouter, type IpnNotification } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import type { Transactions } from 'ipn-kit/orm';
import { runStoreConformance } from 'ipn-kit/testing';
import { ledgerSchema } from './ledger-schema.js';
import { uniquePayload } from './payloads.js';
import { quiet } from './quiet-logger.js';
import { recordEvents } from './record-events.js';
import { postCopies, servedRouters } from './servers.js';
import { databaseUrl, describeWithService, eventually } from './services.js';

/** An ORM opened on one test schema: its transactions, a partner's credit through it, and its end. */
export interface OpenedOrm<Tx> {
  transactions: Transactions<Tx>;
  /** Writes one ledger row for `n` through the ORM's own API, as a partner would. */
  credit(tx: Tx, n: IpnNotification): Promise<void>;
  close(): Promise<void>;
}

/**
 * One ORM for the scenarios of {@link runOrmScenarios}, exported as `fixture` by a file under
 * test/fixtures/orm/ (the crash scenario's child process imports it by path, so it must not use jest).
 */
export interface OrmFixture<Tx> {
  name: string;
  /**
   * Opens the ORM on the test database with `search_path` set to `schema`, where `ledger (transaction_id
   * text NOT NULL, order_id text NOT NULL, amount numeric)` (no unique key) and the inbox `ipn_inbox` exist.
   */
  open(schema: string): Promise<OpenedOrm<Tx>>;
}

/**
 * The scenarios every ORM adapter of `ipn-kit/orm` must pass against the real PostgreSQL, with a ledger that
 * has no unique key (so a second credit shows as a second row): posted twice, one row; a listener that
 * credits then throws on its first attempt, one row after the retry; a lease lost before the commit rolls
 * the credit back; a COMMIT that fails after the mark lands neither (the mark runs in the ORM's
 * transaction); a listener that swallows its own SQL error is never delivered without its credit; the
 * server ending the connection mid-transaction crashes nothing, and the retry credits once; two
 * instances on one store credit once; a process SIGKILLed after the credit and before the commit,
 * restarted, one row; and, when the ORM can run statements on its own, the same through the ORM alone (no
 * pool).
 */
export function runOrmScenarios(fixturePath: string): void {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { fixture } = require(fixturePath) as { fixture: OrmFixture<unknown> };
  jest.setTimeout(60_000);

  describeWithService('PostgreSQL', `exactly once through ${fixture.name}`, () => {
    const ledger = ledgerSchema(`ipn_orm_${fixture.name.toLowerCase().replace(/\W/g, '')}`, COMMIT_FAILS);
    const { keyOf } = ledger;
    let orm: OpenedOrm<unknown>;
    beforeAll(async () => {
      orm = await fixture.open(ledger.schema);
    });
    afterAll(async () => {
      await orm?.close();
    });
    const serve = servedRouters();

    /** A router at least once over the schema's inbox, each attempt in a transaction of the ORM. */
    const router = (options: { leaseMs?: number; maxAttempts?: number; withoutPool?: boolean } = {}) => {
      const { withoutPool, ...rest } = options;
      const store = withoutPool
        ? new PostgresStore({ transactions: orm.transactions })
        : new PostgresStore({ pool: ledger.pool(), transactions: orm.transactions });
      return ipnRouter({
        store,
        delivery: 'at-least-once',
        logger: quiet,
        retryDelayMs: 20,
        recoveryIntervalMs: 50,
        ...rest,
      });
    };
    const rows = async (id: unknown): Promise<number> => (await ledger.ledgerOf(id)).length;
    const delivered = (key: string) =>
      eventually(`${key} delivered`, async () => (await ledger.entryOf(key))?.status === 'delivered');

    test('a notification posted twice credits the ledger once, through the ORM transaction', async () => {
      const ipn = router();
      const seen: unknown[] = [];
      ipn.on('successful', async (n, { tx, db }) => {
        seen.push(db);
        await orm.credit(tx, n);
      });
      const { post } = await serve(ipn);
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      expect((await post(payload)).status).toBe(200);
      await delivered(keyOf(payload));
      expect(await rows(payload.transaction_id)).toBe(1);
      expect(seen).toEqual([undefined]); // no raw db beside the ORM's tx
    });

    test('a listener that credits, then throws on its first attempt: one row after the retry', async () => {
      const ipn = router();
      const recorder = recordEvents(ipn);
      ipn.on('successful', async (n, { tx, attempt }) => {
        await orm.credit(tx, n);
        if (attempt === 1) throw new Error('the order service is down');
      });
      const { post } = await serve(ipn);
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      await delivered(keyOf(payload));
      expect(await rows(payload.transaction_id)).toBe(1);
      expect(await ledger.entryOf(keyOf(payload))).toMatchObject({ attempts: 2 });
      expect(recorder.of('error').map((event) => event.error.message)).toEqual([
        expect.stringContaining('the order service is down'),
      ]);
    });

    test('a lease lost before the commit rolls the credit back; the holder of the lease credits once', async () => {
      const ipn = router({ leaseMs: 1_000 });
      const attempts: number[] = [];
      ipn.on('successful', async (n, { tx, attempt, key }) => {
        attempts.push(attempt);
        await orm.credit(tx, n);
        if (attempt === 1) {
          // Another instance takes the entry meanwhile (its lease runs out after leaseMs, then it is retried).
          await ledger
            .pool()
            .query("UPDATE ipn_inbox SET lease_id = 'another-instance' WHERE key = $1", [key]);
        }
      });
      const { post } = await serve(ipn);
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      await delivered(keyOf(payload));
      expect(attempts).toEqual([1, 2]);
      expect(await rows(payload.transaction_id)).toBe(1); // the first attempt's credit was rolled back
    });

    test('a listener that runs past its time, then credits: that late credit is rolled back, never committed', async () => {
      const ipn = router({ leaseMs: 1_000 }); // the attempt is abandoned after 900 ms
      const late: Array<Promise<void>> = [];
      ipn.on('successful', async (n, { tx, attempt }) => {
        if (attempt === 1) {
          const credit = new Promise<void>((resolve) => setTimeout(resolve, 1_200)).then(() =>
            orm.credit(tx, n),
          );
          late.push(credit.catch(() => {})); // refused by a transaction that ended, or rolled back with it
          await credit;
          return;
        }
        await orm.credit(tx, n);
      });
      const { post } = await serve(ipn);
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      await delivered(keyOf(payload));
      await Promise.all(late);
      expect(await rows(payload.transaction_id)).toBe(1);
      expect(await ledger.entryOf(keyOf(payload))).toMatchObject({ attempts: 2 });
    });

    test("a listener's write after its failed attempt ended (work it did not wait for) is never committed", async () => {
      // Fails when a query through the ORM's transaction object, once that transaction has ended, runs on
      // the connection the ORM gave back to its pool: outside any transaction, committed at once.
      const ipn = router();
      const late: Array<Promise<unknown>> = [];
      ipn.on('successful', async (n, { tx, attempt }) => {
        if (attempt > 1) return orm.credit(tx, n);
        late.push(
          new Promise((resolve) => setTimeout(resolve, 100))
            .then(() => orm.credit(tx, n))
            .catch((error: unknown) => error),
        );
      });
      ipn.on('notification', (n, { attempt }) => {
        if (attempt === 1) throw new Error('the order service is down');
      });
      const { post } = await serve(ipn);
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      await delivered(keyOf(payload));
      await Promise.all(late);
      expect(await rows(payload.transaction_id)).toBe(1);
    });

    test("the kit's late-write rule: a credit through tx once the attempt was abandoned, failed or delivered rejects, and lands nowhere", async () => {
      let tables = 0;
      const result = await runStoreConformance(
        async () => {
          const table = `ipn_conf_late_${(tables += 1)}`;
          const store = new PostgresStore({ pool: ledger.pool(), table, transactions: orm.transactions });
          await store.migrate();
          return store;
        },
        {
          only: ['late-write'],
          lateWrite: {
            write: (tx, id) =>
              orm.credit(tx, { transaction_id: id, custom_data: 'late', amount: 1 } as IpnNotification),
            landed: async (id) => (await rows(id)) > 0,
          },
        },
      );
      expect(result.failures).toEqual([]);
      expect(result.passed).toEqual(['late-write']);
    });

    test('a COMMIT that fails after the mark (a deferred constraint): neither lands; the retry credits once', async () => {
      // Fails when the adapter runs the mark outside the ORM's transaction: the mark would land alone.
      const ipn = router();
      const recorder = recordEvents(ipn);
      ipn.on('successful', async (n, { tx }) => {
        await orm.credit(tx, n);
      });
      const { post } = await serve(ipn);
      const payload = uniquePayload();
      await ledger.pool().query('INSERT INTO commit_fails_for VALUES ($1)', [payload.transaction_id]);
      expect((await post(payload)).status).toBe(200);
      await delivered(keyOf(payload));
      expect(await rows(payload.transaction_id)).toBe(1);
      expect(await ledger.entryOf(keyOf(payload))).toMatchObject({ attempts: 2 });
      expect(recorder.of('error').map((event) => event.error.message)).toEqual([
        expect.stringContaining('the first commit of this payment fails'),
      ]);
    });

    test('a listener that swallows its own SQL error in the transaction: never delivered without its credit', async () => {
      const ipn = router({ maxAttempts: 2 });
      ipn.on('successful', async (n, { tx }) => {
        await orm.credit(tx, n);
        // An "idempotent" write that catches its own failure: PostgreSQL has aborted the transaction.
        await orm.transactions
          .query(tx, { text: 'SELECT 1 / 0', values: [], returns: 'rows' })
          .catch(() => {});
      });
      const { post } = await serve(ipn);
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      const ended = async () => (await ledger.entryOf(keyOf(payload)))?.status;
      await eventually('delivered or dead', async () => ['delivered', 'dead'].includes((await ended())!));
      // Dead with no credit (the transaction was aborted), or, for an ORM that runs each query in a
      // savepoint of its own, delivered with one: never delivered without it.
      const expected = (await ended()) === 'dead' ? 0 : 1;
      expect(await rows(payload.transaction_id)).toBe(expected);
    });

    test('the server ends the connection mid-transaction (a failover): no crash; the retry credits once', async () => {
      // Fails (an unhandled 'error' event: the process would crash) when neither the ORM nor the adapter
      // listens for the error a pg client checked out of its pool emits when its connection ends.
      const ipn = router();
      ipn.on('successful', async (n, { tx, attempt }) => {
        await orm.credit(tx, n);
        if (attempt > 1) return;
        const { rows } = await orm.transactions.query(tx, {
          text: 'SELECT pg_backend_pid() AS pid',
          values: [],
          returns: 'rows',
        });
        await ledger.pool().query('SELECT pg_terminate_backend($1::int, 5000)', [rows[0]!.pid]);
      });
      const { post } = await serve(ipn);
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      await delivered(keyOf(payload));
      expect(await rows(payload.transaction_id)).toBe(1);
      expect(await ledger.entryOf(keyOf(payload))).toMatchObject({ attempts: 2 });
    });

    test('two instances on one store, the notification posted to both at once: one row', async () => {
      const [one, two] = [router(), router()];
      for (const ipn of [one, two]) {
        ipn.on('successful', async (n, { tx }) => {
          await orm.credit(tx, n);
        });
      }
      const urls = [(await serve(one)).url, (await serve(two)).url];
      const payload = uniquePayload();
      expect(await postCopies(urls, payload, 6)).toEqual([200, 200, 200, 200, 200, 200]);
      await delivered(keyOf(payload));
      expect(await rows(payload.transaction_id)).toBe(1);
    });

    test('a process SIGKILLed after the credit, before the commit, then restarted: one row', async () => {
      const payload = uniquePayload();
      const first = await startCrashApp(fixturePath, ledger.schema, true);
      try {
        const exited = new Promise<NodeJS.Signals | null>((resolve) =>
          first.child.once('exit', (_code, signal) => resolve(signal)),
        );
        expect((await post(first.url, payload)).status).toBe(200);
        expect(await exited).toBe('SIGKILL'); // killed by its own listener, between credit and commit
      } finally {
        first.child.kill('SIGKILL');
      }
      expect(await rows(payload.transaction_id)).toBe(0);
      const second = await startCrashApp(fixturePath, ledger.schema, false);
      try {
        // The first app's lease runs out, then the second takes the entry up, through its ORM in a child
        // process: slower than the in-process waits on a loaded machine.
        await eventually(
          'delivered by the restarted app',
          async () => (await ledger.entryOf(keyOf(payload)))?.status === 'delivered',
          60_000,
        );
        expect(await rows(payload.transaction_id)).toBe(1);
      } finally {
        second.child.kill('SIGKILL');
      }
    }, 150_000);

    test('through the ORM alone (no pool of the store): posted twice, and a failed attempt, one row', async () => {
      if (!orm.transactions.execute) {
        console.warn(`${fixture.name}: no execute(): the store needs a pool beside the ORM`);
        return;
      }
      const ipn = router({ withoutPool: true });
      ipn.on('successful', async (n, { tx, attempt }) => {
        await orm.credit(tx, n);
        if (attempt === 1) throw new Error('not yet');
      });
      const { post } = await serve(ipn);
      const payloads = [uniquePayload(), uniquePayload(), uniquePayload()];
      // At once: the store's receives go as one batch (group commit) through the ORM.
      const answers = await Promise.all([...payloads, ...payloads].map((payload) => post(payload)));
      expect(answers.map((answer) => answer.status)).toEqual(answers.map(() => 200));
      for (const payload of payloads) await delivered(keyOf(payload));
      for (const payload of payloads) expect(await rows(payload.transaction_id)).toBe(1);
    });

    test('at most once through the ORM alone: a claim is taken once, and the resend is a duplicate', async () => {
      if (!orm.transactions.execute) {
        console.warn(`${fixture.name}: no execute(): the store needs a pool beside the ORM`);
        return;
      }
      // The claim is two statements (a lock, then the claim) run in one transaction of the ORM.
      const ipn = ipnRouter({ store: new PostgresStore({ transactions: orm.transactions }), logger: quiet });
      const recorder = recordEvents(ipn);
      const { post } = await serve(ipn);
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      expect((await post(payload)).status).toBe(200);
      await eventually('one successful', () => recorder.of('successful').length === 1);
      expect(recorder.of('successful').map((n) => n.transaction_id)).toEqual([payload.transaction_id]);
      expect(recorder.of('duplicate')).toHaveLength(1);
      const claims = await ledger
        .pool()
        .query('SELECT key FROM ipn_inbox_claims WHERE key = $1', [keyOf(payload)]);
      expect(claims.rows).toEqual([{ key: keyOf(payload) }]);
    });

    test('migrate() through the ORM alone makes a fresh inbox (each version several statements), then a claim on it', async () => {
      if (!orm.transactions.execute) {
        console.warn(`${fixture.name}: no execute(): the store needs a pool beside the ORM`);
        return;
      }
      // The version's text starts with `SELECT pg_advisory_xact_lock(...)`, whose column is a void: asked
      // for rows, Prisma's $queryRawUnsafe cannot read it. Only the last statement's rows are read.
      const store = new PostgresStore({ transactions: orm.transactions, table: 'ipn_inbox_orm_alone' });
      const first = await store.migrateSchema();
      expect(first.from).toBe(0);
      expect(await store.migrateSchema()).toEqual({ from: first.to, to: first.to, migrations: [] });
      const key = keyOf(uniquePayload());
      expect(await store.claim(key, 60_000, 'token')).toBe(true);
      expect(await store.claim(key, 60_000, 'another')).toBe(false);
    });
  });
}

/**
 * A deferred constraint trigger on the ledger that fails the first COMMIT crediting a transaction listed in
 * `commit_fails_for` (a sequence counts: it is not rolled back with the failure).
 */
const COMMIT_FAILS = [
  'CREATE TABLE commit_fails_for (transaction_id text PRIMARY KEY)',
  'CREATE SEQUENCE commit_fails',
  `CREATE FUNCTION commit_fails() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    IF EXISTS (SELECT 1 FROM commit_fails_for WHERE transaction_id = NEW.transaction_id)
      AND nextval('commit_fails') = 1 THEN
      RAISE EXCEPTION 'the first commit of this payment fails' USING ERRCODE = '23514';
    END IF;
    RETURN NULL;
  END $$`,
  `CREATE CONSTRAINT TRIGGER commit_fails AFTER INSERT ON ledger DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION commit_fails()`,
];

const post = (url: string, body: unknown) =>
  fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

/** Starts test/processes/orm-crash-app.ts on `fixturePath`; `crash`: it kills itself after its first credit. */
async function startCrashApp(
  fixturePath: string,
  schema: string,
  crash: boolean,
): Promise<{ child: ChildProcess; url: string }> {
  const child = fork(join(__dirname, '..', 'processes', 'orm-crash-app.ts'), [], {
    execArgv: ['--import', 'tsx'],
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl(),
      FIXTURE: fixturePath,
      SCHEMA: schema,
      CRASH: crash ? '1' : '',
    },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const url = await new Promise<string>((resolve, reject) => {
    child.once('message', (message: { url: string }) => resolve(message.url));
    child.once('exit', (code, signal) =>
      reject(new Error(`the app exited before it listened: ${code ?? signal}`)),
    );
  });
  return { child, url };
}
