import { Pool } from 'pg';
import { adminFetchHandler } from '../../lib/admin.js';
import { runCli } from '../../lib/cli/run-cli.js';
import { ipnRouter, MemoryStore } from '../../lib/index.js';
import { PostgresStore } from '../../lib/postgres.js';
import { HOLD_MS } from '../../lib/delivery/kept-unexpected.js';
import { holdLeaseId } from '../../lib/delivery/unexpected.js';
import type { DeliveryStatus } from '../../lib/stores/store.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { servedRouters } from '../helpers/servers.js';
import { databaseUrl, describeWithService, eventually } from '../helpers/services.js';
import { CLEANUP_TIMEOUT_MS, dropPostgresInboxes } from '../helpers/drop-inboxes.js';
import { confirmed, keyOf, notification, pageWithEntry } from '../helpers/admin-forms.js';

/** The operator's actions done once, and done: the paused put-back, a replay form sent again, the CLI's replay of a held notification. */

jest.setTimeout(30_000);
const serve = servedRouters();

/** A MemoryStore whose next replay once armed (the pause's put-back) waits for `release()`. */
class HeldParkStore extends MemoryStore {
  gate: Promise<void> | undefined;
  letGo: () => void = () => {};
  waiting = 0;
  landed: Promise<boolean> | undefined;
  arm(): void {
    this.gate = new Promise<void>((resolve) => (this.letGo = resolve));
  }
  override replay(key: string, delayMs?: number, from?: readonly DeliveryStatus[]): Promise<boolean> {
    const held = this.gate;
    if (held === undefined) return super.replay(key, delayMs, from);
    this.gate = undefined;
    this.waiting += 1;
    this.landed = held.then(() => super.replay(key, delayMs, from));
    return this.landed;
  }
}

describe('pause: the park of a paused attempt', () => {
  test('a park whose put-back lands after its lease ended never makes a delivered entry due again (credited once)', async () => {
    const store = new HeldParkStore();
    const common = { store, delivery: 'at-least-once' as const, logger: quiet, recoveryIntervalMs: 20 };
    // Instance a pauses the fleet, then takes a notification with a short lease; its put-back is slow.
    const a = ipnRouter({ ...common, leaseMs: 200 });
    const b = ipnRouter(common);
    const credited: string[] = [];
    a.on('successful', (n) => void credited.push(n.transaction_id));
    b.on('successful', (n) => void credited.push(n.transaction_id));
    const { post } = await serve(a);
    await serve(b);
    await a.pause();
    store.arm();
    const payload = uniquePayload();
    const key = keyOf(payload);
    expect((await post(payload)).status).toBe(200);
    await eventually('a parks it (its put-back held)', () => store.waiting === 1);
    // The operator resumes from instance b; a's lease runs out and b delivers the payment.
    await b.resume();
    await eventually('b delivered it', async () => (await store.get(key))?.status === 'delivered');
    expect(credited).toEqual([String(payload.transaction_id)]);
    // a's put-back lands now, after the lease it was written under ended.
    store.letGo();
    await store.landed;
    await b.drain();
    await eventually('settled', async () => {
      const entry = await store.get(key);
      return entry?.status === 'delivered' && entry.leaseUntil === null;
    });
    expect(credited).toEqual([String(payload.transaction_id)]);
  });
});

describe('ipn-kit inbox: a date that is no date', () => {
  /** Runs `ipn-kit inbox ...args` (a usage error is found before any database is asked). */
  async function inbox(args: string[]) {
    const stderr: string[] = [];
    const code = await runCli(['inbox', ...args], {
      stdout: () => {},
      stderr: (line) => stderr.push(line),
      env: { DATABASE_URL: 'postgres://127.0.0.1:1/none' },
    });
    return { code, stderr: stderr.join('\n') };
  }

  test.each(['--since', '--until', '--before'])(
    '%s 2026-02-31 is a usage error naming the option',
    async (option) => {
      const command = option === '--before' ? 'purge' : 'replay';
      const { code, stderr } = await inbox([command, option, '2026-02-31']);
      expect(code).toBe(2);
      expect(stderr.split('\n')[0]).toBe(
        `ipn-kit inbox: ${option} must be an ISO date such as 2024-05-01 or 2024-05-01T12:00:00Z, got '2026-02-31'`,
      );
    },
  );
});

describeWithService('PostgreSQL', "the operator's page: one entry's replay", () => {
  let pool: Pool;
  const table = `review_operate_${process.pid}_${Date.now()}`;
  beforeAll(() => void (pool = new Pool({ connectionString: databaseUrl() })));
  afterAll(async () => {
    await dropPostgresInboxes(pool, [table]);
    await pool.end();
  }, CLEANUP_TIMEOUT_MS);

  test('the confirmed replay of a dead entry sent again (a refresh of the result page) is refused 409: credited once', async () => {
    const store = new PostgresStore({ pool, table });
    await store.migrate();
    const { ipn, admin, payload, key, credited } = await pageWithEntry(store, 'dead', { retryDelayMs: 5 });
    try {
      // The operator opens the replay's confirmation and confirms: the form as the browser sends it.
      const send = await confirmed(admin, `action=replay&key=${encodeURIComponent(key)}`);
      expect((await send()).status).toBe(200);
      await eventually('delivered', async () => (await store.get(key))?.status === 'delivered');
      expect(credited).toEqual([String(payload.transaction_id)]);

      // The same form again (a refresh of the result page resubmits it; a second operator's tab): the entry is
      // no longer what was confirmed, so nothing is replayed.
      const again = await send();
      expect(again.status).toBe(409);
      expect(await again.text()).toContain('changed since');
      await ipn.drain();
      expect((await store.get(key))?.status).toBe('delivered');
      expect(credited).toEqual([String(payload.transaction_id)]);
    } finally {
      await ipn.close();
    }
  });

  test('the confirmed replay of what the filter "delivered" shows, sent again, replays nothing more', async () => {
    const store = new PostgresStore({ pool, table });
    await store.migrate();
    const ipn = ipnRouter({ store, delivery: 'at-least-once', logger: quiet, replayRate: 1000 });
    const credited: string[] = [];
    ipn.on('successful', (n) => void credited.push(n.transaction_id));
    const admin = adminFetchHandler({ ipn, authorize: () => ({ actor: 'ada' }) });
    try {
      const payload = uniquePayload();
      const id = String(payload.transaction_id);
      const notify = notification(payload);
      expect((await ipn.fetch(notify)).status).toBe(200);
      await eventually('delivered', async () => (await store.get(keyOf(payload)))?.status === 'delivered');
      // The operator replays it on purpose (say a listener's bug lost its effect): credited a second time.
      const send = await confirmed(admin, `action=replay-filter&status=delivered&transaction=${id}`);
      expect((await send()).status).toBe(200);
      await eventually('replayed', () => credited.length === 2);
      await eventually(
        'delivered again',
        async () => (await store.get(keyOf(payload)))?.status === 'delivered',
      );
      // A refresh of the result page sends the form again.
      await send();
      await ipn.drain();
      await eventually('settled', async () => (await store.get(keyOf(payload)))?.status === 'delivered');
      expect(credited).toEqual([id, id]);
      const replays = (await ipn.inbox.actions()).filter((entry) => entry.action === 'replay-filter');
      expect(replays).toHaveLength(1);
    } finally {
      await ipn.close();
    }
  });
  test('the confirmed replay of a kept unexpected notification still under its hold is done, and delivered', async () => {
    const store = new PostgresStore({ pool, table });
    await store.migrate();
    const payload = uniquePayload();
    const key = keyOf(payload);
    expect(await store.receive(key, payload, { id: holdLeaseId(key), ms: HOLD_MS })).toBe(true);
    const ipn = ipnRouter({ store, delivery: 'at-least-once', logger: quiet });
    const credited: string[] = [];
    ipn.on('successful', (n) => void credited.push(n.transaction_id));
    const admin = adminFetchHandler({ ipn, authorize: () => ({ actor: 'ada' }) });
    try {
      const send = await confirmed(admin, `action=replay&key=${encodeURIComponent(key)}`);
      expect((await send()).status).toBe(200);
      await eventually('delivered', async () => (await store.get(key))?.status === 'delivered');
      expect(credited).toEqual([String(payload.transaction_id)]);
    } finally {
      await ipn.close();
    }
  });
});

describeWithService('PostgreSQL', 'ipn-kit inbox replay <key> of a kept unexpected notification', () => {
  let pool: Pool;
  const table = `review_operate_cli_${process.pid}_${Date.now()}`;
  beforeAll(() => void (pool = new Pool({ connectionString: databaseUrl() })));
  afterAll(async () => {
    await dropPostgresInboxes(pool, [table]);
    await pool.end();
  }, CLEANUP_TIMEOUT_MS);

  test('one still under its hold lease (a crash between its two writes) is made due, and delivered', async () => {
    const store = new PostgresStore({ pool, table });
    await store.migrate();
    const payload = uniquePayload();
    const key = keyOf(payload);
    // Kept under its hold lease, then the process died before the second write (or before its status query
    // answered): labelled "unexpected: not credited, check and replay", delivered only by a replay of its key.
    expect(await store.receive(key, payload, { id: holdLeaseId(key), ms: HOLD_MS })).toBe(true);
    const stdout: string[] = [];
    const code = await runCli(['inbox', 'replay', key, '--table', table, '--actor', 'ada'], {
      stdout: (line) => stdout.push(line),
      stderr: (line) => stdout.push(line),
      env: { DATABASE_URL: databaseUrl() },
    });
    expect(code).toBe(0);
    expect(stdout.join('\n')).toContain('is due again');
    // The app's recovery delivers it, as the command says.
    const ipn = ipnRouter({ store, delivery: 'at-least-once', logger: quiet });
    const credited: string[] = [];
    ipn.on('successful', (n) => void credited.push(n.transaction_id));
    try {
      await ipn.drain();
      await eventually('delivered', async () => (await store.get(key))?.status === 'delivered');
      expect(credited).toEqual([String(payload.transaction_id)]);
    } finally {
      await ipn.close();
    }
  });
});
