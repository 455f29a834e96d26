import { randomUUID } from 'node:crypto';
import type { Pool, PoolClient } from 'pg';
import { PostgresStore, type PgQueryable } from 'ipn-kit/postgres';
import { uniquePayload } from '../helpers/payloads.js';
import { postgresTables } from '../helpers/postgres-tables.js';
import { recordEvents } from '../helpers/record-events.js';
import { answerWithin10s, servedRouters } from '../helpers/servers.js';
import { until } from '../helpers/until.js';
import { describeWithService } from '../helpers/services.js';
import { quietRouter } from '../helpers/verified-payments.js';

jest.setTimeout(30_000);

/**
 * At most once, with expectations in use, a notification nobody expected is claimed only to tell a resend,
 * then released and answered 503 (`unexpected`), so that the service resends it. That release is a store
 * call like the claim: one that does not answer (its row locked by another session, a pool with no free
 * connection) hung the request for as long as it lasted, where the claim before it is bounded by
 * `storeTimeoutMs`. It is answered 503 after `storeTimeoutMs` now, with `rejected` and an `error` saying the
 * key is still held (a resend meanwhile is a duplicate); the release lands once the store answers.
 */
describeWithService('PostgreSQL', 'the release of a refused unexpected notification', () => {
  const { admin, table: migrated } = postgresTables('urb');
  const serve = servedRouters();

  /**
   * The pool, but a release of a claim (its DELETE) finds its row locked by another session first (an
   * operator's purge, a long retention pass): it waits in PostgreSQL until `unlock()`.
   */
  function lockingReleases(pool: Pool, claims: string) {
    let locker: PoolClient | undefined;
    const queryable: PgQueryable = {
      async query(text: string, values?: unknown[]): ReturnType<PgQueryable['query']> {
        if (locker === undefined && /^\s*DELETE FROM\b/i.test(text) && text.includes(claims)) {
          locker = await admin.connect();
          await locker.query('BEGIN');
          await locker.query(`SELECT 1 FROM ${claims} WHERE key = $1 FOR UPDATE`, [values?.[0]]);
        }
        return pool.query(text, values);
      },
    };
    const unlock = async (): Promise<void> => {
      await locker?.query('ROLLBACK');
      locker?.release();
    };
    return { queryable, unlock, locked: () => locker !== undefined };
  }

  test('a release that does not answer is a 503 unexpected after storeTimeoutMs, rejected and an error; the resend is credited once it lands', async () => {
    const table = await migrated();
    const releases = lockingReleases(admin, `"${table}_claims"`);
    const ipn = quietRouter({
      store: new PostgresStore({ pool: releases.queryable, table }),
      storeTimeoutMs: 300,
    });
    const events = recordEvents(ipn);
    const served = await serve(ipn);
    await ipn.expect(`EXP.${randomUUID().slice(0, 8)}`, { amount: 5000, customData: 'order-1' });
    const payload = uniquePayload(); // a transaction nobody expected (yet)
    const post = () => answerWithin10s(served.url, payload);

    try {
      const answer = await post();
      expect(releases.locked()).toBe(true);
      expect(answer).toEqual({ status: 503, body: expect.objectContaining({ error: 'unexpected' }) });
      await until(() => events.count('error') > 0, 'the error event');
      expect(events.of('rejected')).toEqual([expect.objectContaining({ reason: 'unexpected' })]);
      expect(events.of('error')).toEqual([
        expect.objectContaining({
          error: expect.objectContaining({
            code: 'IPN_STORE_FAILED',
            message: expect.stringMatching(/did not release .* answered as a duplicate/),
          }),
        }),
      ]);
    } finally {
      await releases.unlock();
    }

    // The release lands once the lock is gone; checked and expected, the service's resend is credited once.
    await ipn.expect(payload.transaction_id as string, {
      amount: payload.amount as number,
      customData: payload.custom_data,
    });
    let resend = await post();
    for (let tries = 0; resend.status !== 200 && tries < 100; tries += 1) resend = await post();
    expect(resend).toEqual({ status: 200, body: { ok: true } });
    await until(() => events.count('successful') > 0, 'the credit');
    expect(events.count('successful')).toBe(1);
  });
});
