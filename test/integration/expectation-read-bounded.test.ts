import { Pool, type PoolClient } from 'pg';
import { PostgresStore } from 'ipn-kit/postgres';
import { uniquePayload } from '../helpers/payloads.js';
import { postgresTables } from '../helpers/postgres-tables.js';
import { recordEvents } from '../helpers/record-events.js';
import { answerWithin10s, servedRouters } from '../helpers/servers.js';
import { until } from '../helpers/until.js';
import { databaseUrl, describeWithService } from '../helpers/services.js';
import { quietRouter } from '../helpers/verified-payments.js';

jest.setTimeout(30_000);

/**
 * The expectation check before the claim is a store read like the claim: one stuck (the `_expected` table
 * locked by a migration's ALTER TABLE, a pool whose connections are all taken) must end in the documented
 * 503 after `storeTimeoutMs`, so the service resends; it hung the request for as long as the lock lasted,
 * on the instance that called `ipn.expect()` and on every other one (which reads the mark of their use).
 */
describeWithService('PostgreSQL', 'the expectation read before the claim', () => {
  const { admin, table: migrated } = postgresTables('erb');
  const serve = servedRouters();
  const pools: Pool[] = [];
  afterEach(async () => {
    await Promise.all(pools.splice(0).map((pool) => pool.end()));
  });

  async function instance(table: string) {
    const pool = new Pool({ connectionString: databaseUrl() });
    pools.push(pool);
    const ipn = quietRouter({ store: new PostgresStore({ pool, table }), storeTimeoutMs: 300 });
    const { url } = await serve(ipn);
    return { ipn, url, events: recordEvents(ipn) };
  }

  /** POSTs `payload` while another session holds `<table>_expected` locked; the answer, or why none came. */
  async function postWhileLocked(table: string, url: string, payload: unknown) {
    const locker: PoolClient = await admin.connect();
    try {
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE ${table}_expected IN ACCESS EXCLUSIVE MODE`);
      const answer = await answerWithin10s(url, payload);
      return answer;
    } finally {
      await locker.query('ROLLBACK');
      locker.release();
    }
  }

  test.each(['the instance that expected it', 'another instance over the store'])(
    'a read stuck behind a lock is answered 503 store_unavailable, then the resend is credited once (%s)',
    async (which) => {
      const table = await migrated();
      const a = await instance(table);
      const b = which === 'the instance that expected it' ? a : await instance(table);
      const payload = uniquePayload();
      await a.ipn.expect(payload.transaction_id as string, {
        amount: payload.amount as number,
        customData: payload.custom_data,
      });

      const answer = await postWhileLocked(table, b.url, payload);
      expect(answer).toEqual({ status: 503, body: expect.objectContaining({ error: 'store_unavailable' }) });
      expect(b.events.of('error')).toEqual([
        expect.objectContaining({ error: expect.objectContaining({ code: 'IPN_STORE_FAILED' }) }),
      ]);

      // The lock gone, the service's resend is credited, once.
      const resend = await fetch(b.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(payload),
      });
      expect(resend.status).toBe(200);
      expect(await resend.json()).toEqual({ ok: true });
      await until(() => b.events.count('successful') > 0, 'the credit');
      expect(b.events.of('successful').map((n: { transaction_id: string }) => n.transaction_id)).toEqual([
        payload.transaction_id,
      ]);
    },
  );
});
