import { randomUUID } from 'node:crypto';
import { Pool } from 'pg';
import { ipnRouter, MemoryStore, PurgeWindowError, type IpnRouter } from '../../lib/index.js';
import { PostgresStore } from '../../lib/postgres.js';
import type { DurableStore } from '../../lib/stores/store.js';
import { runCli } from '../../lib/cli/run-cli.js';
import type { CliIo } from '../../lib/cli/cli-io.js';
import { checkPurgeWindow, retentionPass } from '../../lib/delivery/retention.js';
import { listActions } from '../../lib/delivery/audit.js';
import { RETENTION_DEFAULTS } from '../../lib/config/retention-options.js';
import { confirmed, keyOf, notification, pageWithEntry } from '../helpers/admin-forms.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { databaseUrl, describeWithService, eventually } from '../helpers/services.js';
import { CLEANUP_TIMEOUT_MS, dropPostgresInboxes } from '../helpers/drop-inboxes.js';

// A purge of delivered entries inside the dedupe window (before later than ttlMs ago) deleted what makes a
// resend a duplicate: the service resends until it gets a 200, days later, and the resend was credited
// again. Each surface (ipn.inbox.purge, the operator's page, the CLI) now refuses it unless asked for.

const DAY = 24 * 60 * 60 * 1000;
const TTL = 7 * DAY;

/** The routers of the test under way, closed after it. */
const opened: IpnRouter[] = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((ipn) => ipn.close()));
});

/** A router over `store`, at least once, whose listener lists each transaction id it credits; closed after the test. */
async function router(store: DurableStore) {
  const ipn = ipnRouter({ store, delivery: 'at-least-once', logger: quiet, recoveryIntervalMs: 20 });
  opened.push(ipn);
  const credited: string[] = [];
  ipn.on('successful', (n) => {
    credited.push(n.transaction_id);
  });
  const payload = uniquePayload();
  expect((await ipn.fetch(notification(payload))).status).toBe(200);
  await eventually('delivered', async () => (await store.get(keyOf(payload)))?.status === 'delivered');
  return { ipn, credited, payload, key: keyOf(payload) };
}

/** What the router answers to a resend of `payload`. */
async function resend(ipn: IpnRouter, payload: Record<string, unknown>) {
  const answer = await ipn.fetch(notification(payload));
  return { status: answer.status, body: await answer.json() };
}

/** The entry of `key` still delivered, a resend of `payload` answered as a duplicate, the payment credited once. */
async function expectStillADuplicate(
  store: DurableStore,
  { ipn, credited, payload, key }: Awaited<ReturnType<typeof router>>,
) {
  expect(await store.get(key)).toMatchObject({ status: 'delivered' });
  expect(await resend(ipn, payload)).toEqual({ status: 200, body: { ok: true, duplicate: true } });
  expect(credited).toEqual([payload.transaction_id]);
}

/** Runs `ipn-kit inbox ...args` on DATABASE_URL, capturing its output. */
async function cli(args: string[]) {
  const stdout: string[] = [];
  const stderr: string[] = [];
  const io: CliIo = {
    stdout: (line) => stdout.push(line),
    stderr: (line) => stderr.push(line),
    env: { DATABASE_URL: databaseUrl() },
  };
  const code = await runCli(['inbox', ...args], io);
  return { code, stdout: stdout.join('\n'), stderr: stderr.join('\n') };
}

describe('the dedupe window of a purge (the rule)', () => {
  const now = Date.UTC(2026, 10, 30);
  const refused = (before: number, status?: string, inside = false) => {
    try {
      checkPurgeWindow(new Date(before), status, TTL, inside, 'do X', now);
      return false;
    } catch (error) {
      expect(error).toBeInstanceOf(PurgeWindowError);
      return true;
    }
  };

  test('refuses a date later than now - ttlMs, lets the boundary (retention) and older through', () => {
    expect(refused(now)).toBe(true);
    expect(refused(now - TTL + 1)).toBe(true);
    expect(refused(now - TTL)).toBe(false);
    expect(refused(now - TTL - 1)).toBe(false);
  });

  test('dead purges and an explicit ask are not refused', () => {
    expect(refused(now, 'dead')).toBe(false);
    expect(refused(now, 'delivered', true)).toBe(false);
    expect(refused(now, 'delivered')).toBe(true);
  });

  test('the refusal says why and how to do it anyway', () => {
    let error: PurgeWindowError | undefined;
    try {
      checkPurgeWindow(new Date(now), undefined, TTL, false, 'do X', now);
    } catch (thrown) {
      error = thrown as PurgeWindowError;
    }
    expect(error).toMatchObject({
      code: 'IPN_PURGE_INSIDE_DEDUPE_WINDOW',
      before: new Date(now),
      dedupeWindowStart: new Date(now - TTL),
      ttlMs: TTL,
    });
    expect(error!.message).toContain('ttlMs, 7 days');
    expect(error!.message).toContain('credited, a second time');
    expect(error!.message).toMatch(/do X$/);
  });

  test('a ttlMs reaching before the first Date still refuses with a readable message', () => {
    expect(() =>
      checkPurgeWindow(new Date(now), 'delivered', Number.MAX_SAFE_INTEGER, false, 'do X', now),
    ).toThrow(PurgeWindowError);
  });
});

describe('ipn.inbox.purge on a MemoryStore', () => {
  test('inside the dedupe window: refused, the entry stays, a resend is a duplicate', async () => {
    const store = new MemoryStore();
    const { ipn, credited, payload, key } = await router(store);
    await expect(ipn.inbox.purge(new Date())).rejects.toMatchObject({
      name: 'PurgeWindowError',
      code: 'IPN_PURGE_INSIDE_DEDUPE_WINDOW',
      message: expect.stringContaining('insideDedupeWindow: true'),
    });
    await expect(ipn.inbox.purge(new Date(), 'delivered')).rejects.toThrow(PurgeWindowError);
    await expectStillADuplicate(store, { ipn, credited, payload, key });
  });

  test('asked for explicitly, it purges (and a resend is then credited again, as the option says)', async () => {
    const store = new MemoryStore();
    const { ipn, credited, payload, key } = await router(store);
    const before = new Date(Date.now() + 60_000);
    expect(await ipn.inbox.purge(before, 'delivered', { insideDedupeWindow: true })).toBe(1);
    expect(await store.get(key)).toBeUndefined();
    expect((await resend(ipn, payload)).body).toEqual({ ok: true });
    await eventually('credited again', () => credited.length === 2);
  });

  // The rule left a `before` that is no Date to the store's own check, and MemoryStore has none: a number
  // (a timestamp, from JavaScript) deleted every delivered entry, today's included, without the opt-in.
  test('a before that is no valid Date, or a status no purge knows, is refused before any store deletes', async () => {
    const store = new MemoryStore();
    const { ipn, credited, payload, key } = await router(store);
    const later = Date.now() + 60_000;
    for (const before of [later, new Date(later).toISOString(), new Date(Number.NaN)]) {
      await expect(ipn.inbox.purge(before as unknown as Date)).rejects.toThrow(
        /ipn\.inbox\.purge: before must be a valid Date/,
      );
    }
    await expect(ipn.inbox.purge(new Date(later), 'received' as 'dead')).rejects.toThrow(
      /status must be 'delivered' or 'dead'/,
    );
    await expectStillADuplicate(store, { ipn, credited, payload, key });
  });

  test('before now - ttlMs (or at it) is not refused, and keeps what is newer; dead purges are not refused', async () => {
    const store = new MemoryStore();
    const { ipn, key } = await router(store);
    expect(await ipn.inbox.purge(new Date(Date.now() - TTL))).toBe(0);
    expect(await ipn.inbox.purge(new Date(Date.now() - TTL - DAY), 'delivered')).toBe(0);
    expect(await store.get(key)).toMatchObject({ status: 'delivered' });
    expect(await ipn.inbox.purge(new Date(Date.now() + 60_000), 'dead')).toBe(0);
  });
});

// The audit trail said insideDedupeWindow for every purge whose box (or flag) was given, one well outside the
// window included: who reads it for the purge that let a resend be credited twice was sent to a harmless one.
describe("the audit trail's insideDedupeWindow", () => {
  test("the operator's page: the box ticked for a date outside the window is not kept as inside", async () => {
    const store = new MemoryStore();
    const { ipn, admin } = await pageWithEntry(store, 'delivered');
    try {
      const ticked = await confirmed(admin, 'action=purge', (form) => {
        form.set('before', '2020-01-01');
        form.set('inside-dedupe-window', 'yes');
      });
      expect((await ticked()).status).toBe(200);
      const [audit] = await ipn.inbox.actions({ limit: 1 });
      expect(audit).toMatchObject({
        action: 'purge',
        detail: { before: '2020-01-01T00:00:00.000Z', count: 0 },
      });
      expect(audit!.detail).not.toHaveProperty('insideDedupeWindow');
    } finally {
      await ipn.close();
    }
  });
});

describeWithService('PostgreSQL', 'a purge inside the dedupe window, on PostgreSQL', () => {
  let pool: Pool;
  const tables: string[] = [];

  async function freshStore(): Promise<PostgresStore> {
    const table = `ipn_test_purge_window_${process.pid}_${randomUUID().slice(0, 8)}`;
    tables.push(table);
    const store = new PostgresStore({ pool, table });
    await store.migrate();
    return store;
  }

  /** Makes `key`'s delivery `days` old. */
  async function deliveredAgo(store: PostgresStore, key: string, days: number) {
    await pool.query(
      `UPDATE "${store.table}" SET delivered_at = now() - make_interval(days => $2) WHERE key = $1`,
      [key, days],
    );
  }

  beforeAll(() => {
    pool = new Pool({ connectionString: databaseUrl(), max: 4 });
    pool.on('error', () => {});
  });

  afterAll(async () => {
    await dropPostgresInboxes(pool, tables);
    await pool.end();
  }, CLEANUP_TIMEOUT_MS);

  test('ipn.inbox.purge: refused inside, the row stays and a resend is a duplicate; before now - ttlMs it purges', async () => {
    const store = await freshStore();
    const { ipn, credited, payload, key } = await router(store);
    await expect(ipn.inbox.purge(new Date())).rejects.toThrow(PurgeWindowError);
    await expectStillADuplicate(store, { ipn, credited, payload, key });

    await deliveredAgo(store, key, 8);
    expect(await ipn.inbox.purge(new Date(Date.now() - TTL))).toBe(1);
    expect(await store.get(key)).toBeUndefined();
  });

  test("retention's own pass, at now - ttlMs, still deletes what is older", async () => {
    const store = await freshStore();
    const { key } = await router(store);
    await deliveredAgo(store, key, 8);
    expect(await retentionPass(store, TTL, RETENTION_DEFAULTS)).toMatchObject({ delivered: 1 });
    expect(await store.get(key)).toBeUndefined();
  });

  test("the operator's page: refused (409, saying why and how), the row stays; the ticked box purges", async () => {
    const store = await freshStore();
    const { ipn, admin, payload, key, credited } = await pageWithEntry(store, 'delivered');
    try {
      const today = new Date().toISOString().slice(0, 10);
      const confirm = await admin(new Request('http://shop.test/confirm?action=purge'));
      expect(await confirm.text()).toContain('name="inside-dedupe-window"');

      const send = await confirmed(admin, 'action=purge', (form) => form.set('before', today));
      const refusedAnswer = await send();
      expect(refusedAnswer.status).toBe(409);
      const page = await refusedAnswer.text();
      expect(page).toContain('IPN_PURGE_INSIDE_DEDUPE_WINDOW');
      expect(page).toContain('credited, a second time');
      expect(page).toContain('confirm again with the box');
      await expectStillADuplicate(store, { ipn, credited, payload, key });

      const tomorrow = new Date(Date.now() + DAY).toISOString().slice(0, 10);
      const ticked = await confirmed(admin, 'action=purge', (form) => {
        form.set('before', tomorrow);
        form.set('inside-dedupe-window', 'yes');
      });
      const done = await ticked();
      expect(done.status).toBe(200);
      expect(await done.text()).toContain('Purged 1 delivered entries');
      expect(await store.get(key)).toBeUndefined();
      const [audit] = await ipn.inbox.actions({ limit: 1 });
      expect(audit).toMatchObject({ action: 'purge', detail: { insideDedupeWindow: true, count: 1 } });
    } finally {
      await ipn.close();
    }
  });

  test('the CLI: refused (exit 1, saying why and how), nothing deleted, claims kept; the flag purges', async () => {
    const store = await freshStore();
    const { ipn, payload, key } = await router(store);
    const claimed = `TX.${process.pid}.claim:SUCCESSFUL`;
    expect(await store.claim(claimed, TTL, randomUUID())).toBe(true);
    const today = new Date().toISOString();
    const refusedRun = await cli(['purge', '--before', today, '--table', store.table]);
    expect(refusedRun.code).toBe(1);
    expect(refusedRun.stderr).toContain('ipn-kit inbox purge: refused to purge');
    expect(refusedRun.stderr).toContain('credited, a second time');
    expect(refusedRun.stderr).toContain('add --inside-dedupe-window');
    expect(await store.get(key)).toMatchObject({ status: 'delivered' });
    expect(await store.claim(claimed, TTL, randomUUID())).toBe(false); // the claim still holds its key
    expect(await resend(ipn, payload)).toEqual({ status: 200, body: { ok: true, duplicate: true } });
    expect(await ipn.inbox.actions({ limit: 10 })).toEqual([]);

    // A shorter ttlMs of the app's, said with --ttl-ms: eight days ago is outside its window of one day.
    await deliveredAgo(store, key, 8);
    const shorter = new Date(Date.now() - 2 * DAY).toISOString();
    expect((await cli(['purge', '--before', shorter, '--table', store.table])).code).toBe(1);
    const ttlRun = await cli(['purge', '--before', shorter, '--ttl-ms', String(DAY), '--table', store.table]);
    expect(ttlRun).toMatchObject({ code: 0, stdout: expect.stringContaining('deleted 1 delivered entry') });
    expect(await store.get(key)).toBeUndefined();

    const forced = await cli(['purge', '--before', today, '--inside-dedupe-window', '--table', store.table]);
    expect(forced).toMatchObject({ code: 0, stdout: expect.stringContaining('deleted 1 delivered entry') });
    expect(await store.claim(claimed, TTL, randomUUID())).toBe(true); // its claim went with it
  });

  test('the CLI: --inside-dedupe-window for a date outside the window is not kept as inside', async () => {
    const store = await freshStore();
    const { ipn } = await router(store);
    const run = await cli([
      'purge',
      '--before',
      '2020-01-01',
      '--inside-dedupe-window',
      '--table',
      store.table,
    ]);
    expect(run.code).toBe(0);
    const [audit] = await ipn.inbox.actions({ limit: 1 });
    expect(audit).toMatchObject({
      action: 'purge',
      detail: { before: '2020-01-01T00:00:00.000Z', count: 0 },
    });
    expect(audit!.detail).not.toHaveProperty('insideDedupeWindow');
  });

  // The window was measured by the clock of the machine that purges, the deliveries stamped by the database's
  // (now(); UTC_TIMESTAMP(3) on MySQL, TIME on Redis): a CLI on a machine whose clock is ahead deleted entries
  // still inside the window by the database's clock (as far inside as the skew).
  test("the CLI's window is measured by the database's clock, which stamped the deliveries", async () => {
    const store = await freshStore();
    const { key } = await router(store);
    await deliveredAgo(store, key, 6); // six days ago by the database's clock: inside the 7 days
    const real = Date.now;
    const ahead = jest.spyOn(Date, 'now').mockImplementation(() => real() + 2 * DAY); // this machine: +2 days
    let run: Awaited<ReturnType<typeof cli>>;
    try {
      const before = new Date(Date.now() - TTL).toISOString(); // where this machine's window starts
      run = await cli(['purge', '--before', before, '--table', store.table]);
    } finally {
      ahead.mockRestore();
    }
    expect(run.code).toBe(1);
    expect(await store.get(key)).toMatchObject({ status: 'delivered' });
  });

  // The CLI does not know the app's ttlMs (--ttl-ms, default 7 days). An app at most once with ttlMs 30 days:
  // a claim made 10 days ago still holds its key for 20 days (its expires_at says so), yet a purge before 8
  // days ago deleted it with the claims made before the date, and the resend was credited a second time. The
  // CLI now counts those claims (by the database's clock) and refuses unless asked for.
  test('the CLI keeps an at-most-once claim that still holds its key (the app ttlMs longer than --ttl-ms)', async () => {
    const store = await freshStore();
    const claimed = `TX.${process.pid}.live:SUCCESSFUL`;
    expect(await store.claim(claimed, 30 * DAY, randomUUID())).toBe(true); // the app's ttlMs: 30 days
    await pool.query(
      `UPDATE "${store.table}_claims" SET claimed_at = now() - make_interval(days => 10),
         expires_at = now() - make_interval(days => 10) + make_interval(days => $2) WHERE key = $1`,
      [claimed, 30],
    );
    const before = new Date(Date.now() - 8 * DAY).toISOString();
    const lease = { id: randomUUID(), ms: 60_000 };
    const key = `TX.${process.pid}.old:SUCCESSFUL`;
    await store.receive(key, { transaction_id: `TX.${process.pid}.old` }, lease);
    await store.settle(key, lease.id, { status: 'delivered' });
    await deliveredAgo(store, key, 9); // outside the 7 days: purged but for the live claim
    const audited = (await listActions(store, { limit: 100 })).length;

    const refused = await cli(['purge', '--before', before, '--table', store.table]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('1 at-most-once claim made before it still holds its key');
    // Not necessarily the app's ttlMs today: a claim keeps the ttlMs it was made under (since lowered, or
    // another deploy's on the same inbox), and --ttl-ms may well be the app's.
    expect(refused.stderr).toContain("made under a longer ttlMs than --ttl-ms, your app's now or earlier");
    expect(refused.stderr).toContain('credited, again');
    expect(refused.stderr).toContain('--inside-dedupe-window');
    expect(await store.claim(claimed, 30 * DAY, randomUUID())).toBe(false); // it holds its key 20 days more
    expect(await store.get(key)).toMatchObject({ status: 'delivered' }); // nothing deleted
    expect(await listActions(store, { limit: 100 })).toHaveLength(audited); // nothing audited

    // Asked for, the live claim goes with the rest (an operator clearing claims after an at-most-once crash).
    const forced = await cli(['purge', '--before', before, '--inside-dedupe-window', '--table', store.table]);
    expect(forced).toMatchObject({ code: 0, stdout: expect.stringContaining('deleted 2 delivered entries') });
    expect(await store.claim(claimed, 30 * DAY, randomUUID())).toBe(true);
    expect(await store.get(key)).toBeUndefined();
    // The date is outside --ttl-ms's window, but the purge went inside the claim's: the audit trail says so,
    // for whoever looks for the purge that let a resend be credited twice.
    const [audit] = await listActions(store, { limit: 1 });
    expect(audit).toMatchObject({ action: 'purge', detail: { insideDedupeWindow: true } });
  });

  // The CLI counted the live claims, then deleted the claims made before the date in another statement: a claim
  // committed between the two (a takeover, or a first claim, whose transaction began before the date: its
  // now() is its transaction's start, and it may wait for the inbox's lock up to storeTimeoutMs) was deleted
  // while it held its key. --ttl-ms as short as that wait: the CLI does not know the app's ttlMs.
  test('the CLI: a claim committed between the count and the delete still holds its key', async () => {
    const store = await freshStore();
    const key = `TX.${process.pid}.late:SUCCESSFUL`;
    // A write of the inbox in progress: the claim waits for it (LOCK TABLE ... IN SHARE MODE), its now() fixed.
    const writer = await pool.connect();
    const original = PostgresStore.prototype.purge;
    let purge: jest.SpyInstance | undefined;
    try {
      await writer.query('BEGIN');
      await writer.query(`LOCK TABLE "${store.table}" IN ROW EXCLUSIVE MODE`);
      const claiming = store.claim(key, 30 * DAY, randomUUID()); // the app's ttlMs: 30 days
      let began: Date | undefined;
      await eventually('the claim waits for the inbox', async () => {
        const { rows } = await pool.query(
          `SELECT xact_start FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`,
          [`%${store.table}_claims%`],
        );
        began = (rows[0] as { xact_start: Date } | undefined)?.xact_start;
        return began !== undefined;
      });
      // A date just after the claim's transaction began, outside a --ttl-ms of 1 ms by the database's clock.
      const before = new Date(began!.getTime() + 1);
      await eventually('the database is past the date', async () => {
        const { rows } = await pool.query(`SELECT now() > $1::timestamptz + interval '5 ms' AS past`, [
          before,
        ]);
        return (rows[0] as { past: boolean }).past;
      });
      // The CLI counted (the claim not yet committed: none live); before its delete, the write commits and
      // the claim with it, made at its transaction's start: before the date.
      purge = jest.spyOn(PostgresStore.prototype, 'purge').mockImplementationOnce(async function (
        this: PostgresStore,
        ...args
      ) {
        await writer.query('COMMIT');
        expect(await claiming).toBe(true);
        return original.apply(this, args);
      });
      const run = await cli([
        'purge',
        '--before',
        before.toISOString(),
        '--ttl-ms',
        '1',
        '--table',
        store.table,
      ]);
      expect(run.code).toBe(0);
      expect(purge).toHaveBeenCalledTimes(1);
    } finally {
      purge?.mockRestore();
      await writer.query('ROLLBACK').catch(() => {});
      writer.release();
    }
    expect(await store.claim(key, 30 * DAY, randomUUID())).toBe(false); // it holds its key 30 days
  });

  // retention's pass (and ipn.inbox.purge) deletes the claims made before now - ttlMs by claimed_at alone: a
  // claim made under a longer ttlMs (an at-most-once deploy with ttlMs 30 days, since switched to at least once
  // with 7 days, on the same inbox) still holding its key was deleted, and the resend was credited again.
  test("retention's pass keeps a claim still holding its key (made under a longer, since-lowered ttlMs)", async () => {
    const store = await freshStore();
    const claimed = `TX.${process.pid}.lowered:SUCCESSFUL`;
    expect(await store.claim(claimed, 30 * DAY, randomUUID())).toBe(true);
    await pool.query(
      `UPDATE "${store.table}_claims" SET claimed_at = now() - make_interval(days => 10),
         expires_at = now() + make_interval(days => 20) WHERE key = $1`,
      [claimed],
    );
    await retentionPass(store, TTL, RETENTION_DEFAULTS);
    expect(await store.claim(claimed, 30 * DAY, randomUUID())).toBe(false); // it holds its key 20 days more
  });

  test('the CLI: an expired claim made before the date does not refuse the purge', async () => {
    const store = await freshStore();
    const expired = `TX.${process.pid}.gone:SUCCESSFUL`;
    expect(await store.claim(expired, 9 * DAY, randomUUID())).toBe(true);
    await pool.query(
      `UPDATE "${store.table}_claims" SET claimed_at = now() - make_interval(days => 10),
         expires_at = now() - make_interval(days => 1) WHERE key = $1`,
      [expired],
    );
    const before = new Date(Date.now() - 8 * DAY).toISOString();
    const run = await cli(['purge', '--before', before, '--table', store.table]);
    expect(run).toMatchObject({ code: 0, stdout: expect.stringContaining('deleted 1 delivered entry') });
  });

  test('the CLI: --dead is not limited by the window, and takes no window option', async () => {
    const store = await freshStore();
    const now = new Date().toISOString();
    expect((await cli(['purge', '--before', now, '--dead', '--table', store.table])).code).toBe(0);
    const mixed = await cli(['purge', '--before', now, '--dead', '--inside-dedupe-window']);
    expect(mixed.code).toBe(2);
    expect(mixed.stderr).toContain('--dead purges dead entries, which the dedupe window does not limit');
  });
});
