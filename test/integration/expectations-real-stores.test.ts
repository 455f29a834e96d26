import { Pool } from 'pg';
import { ipnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, settle } from '../helpers/servers.js';
import { databaseUrl, describeWithService } from '../helpers/services.js';
import { CLEANUP_TIMEOUT_MS, dropPostgresInboxes } from '../helpers/drop-inboxes.js';
import { NO_SWEEP, paid, perTestService, statusClientOf } from '../helpers/verified-payments.js';

/** A verification that never answers: the service is down (for verification; the sweep's client answers). */
const neverAnswers = { getStatus: () => new Promise<never>(() => {}) };

// The late settle and reopen of an expectation (at most once with `verify`) on a store that answers over the
// network: each reads the expectation the store holds then and writes after that read, one round trip later.

jest.setTimeout(30_000);

const suffix = `${process.pid}_${Date.now() % 100_000}`;
let made = 0;

describeWithService(
  'PostgreSQL',
  'expectations settled or made due after verification: PostgresStore',
  () => {
    const t = perTestService({ unhandled: true });
    const tables: string[] = [];
    const admin = new Pool({ connectionString: databaseUrl() });
    afterAll(async () => {
      await dropPostgresInboxes(admin, tables);
      await admin.end();
    }, CLEANUP_TIMEOUT_MS);

    /** A fresh inbox table (its expectations beside it), migrated. */
    async function table(): Promise<string> {
      const name = `ipn_rx_${suffix}_${(made += 1)}`;
      tables.push(name);
      await new PostgresStore({ pool: admin, table: name }).migrate();
      return name;
    }

    // The documented shutdown (docs/frameworks.md): `ipn.close().finally(() => pool.end())`. A copy still
    // being verified is let go at close(): its key released (two statements on the SQL stores) and its
    // expectation made due again (a read, then a write one round trip later). When a sweep settled the
    // expectation on the held key meanwhile, those writes are all that is left of the payment (the genuine copy
    // was answered 503 meanwhile, and the service may have stopped resending): they must have landed by the time close() resolves, before the pool ends.
    // Second case: the reopen's read answered only once the release is done, so its write comes last.
    for (const order of ['as it comes', 'read after the release'] as const) {
      test(`a sweep while a forged copy is verified, then close() and pool.end(), the expectation ${order}: the next process sweeps it`, async () => {
        const id = await paid(t.provider);
        const name = await table();
        const pool = new Pool({ connectionString: databaseUrl() });
        const client = statusClientOf(t.provider);
        const settings = (store: PostgresStore, verify: { getStatus: typeof client.getStatus }) =>
          ({
            store,
            verify,
            statusClient: client,
            logger: quiet,
            reconcileAfterMs: 1,
            sweepIntervalMs: NO_SWEEP,
            // The first attempt gives up at once, its retry far off: the copy waits in memory when close() comes.
            verifyTimeoutMs: 20,
            verifyRetryDelayMs: 60 * 60_000,
          }) as const;
        const store = new PostgresStore({ pool, table: name });
        let closing = false;
        if (order === 'read after the release') {
          let released: Promise<void> = Promise.resolve();
          const release = store.release.bind(store);
          store.release = (key: string, leaseId?: string) => (released = release(key, leaseId));
          const get = store.expectations.get.bind(store.expectations);
          store.expectations.get = async (transactionId: string) => {
            const held = await get(transactionId);
            if (closing) await released;
            return held;
          };
        }
        const ipn = (t.ipn = ipnRouter(settings(store, neverAnswers)));
        const first = recordEvents(ipn);
        t.running = await listen(ipn);
        const url = `${t.running.url}/`;
        await ipn.expect(id, { amount: 100 });
        await t.provider.forge({ ipnUrl: url, transactionId: id, customData: 'order-forged' });
        // The genuine copy, while the forgery is being verified: 503 (the service would resend it).
        expect(await t.provider.forge({ ipnUrl: url, transactionId: id })).toBe(503);
        await ipn.sweep(); // the key is held by the forgery being verified: the expectation settled
        await t.running.close();
        t.running = undefined;
        closing = true;
        await ipn.close({ timeoutMs: 5_000 }).finally(() => pool.end());
        t.ipn = undefined;
        await settle();
        // What close() reports: the copy it let go (not verified); nothing of the store or the pool.
        const errors = first.of('error').map((e: { error: Error }) => e.error.message);
        expect(errors.filter((m: string) => /store|pool/i.test(m))).toEqual([]);
        const nextPool = new Pool({ connectionString: databaseUrl() });
        try {
          const next = (t.ipn = ipnRouter(
            settings(new PostgresStore({ pool: nextPool, table: name }), client),
          ));
          const recorder = recordEvents(next);
          expect(await next.sweep()).toMatchObject({ reconciled: 1 });
          await settle();
          expect(recorder.of('successful')).toMatchObject([{ transaction_id: id, custom_data: 'order-a' }]);
          await next.close();
          t.ipn = undefined;
        } finally {
          await nextPool.end();
        }
        expect(t.unhandled).toEqual([]);
      });
    }
  },
);
