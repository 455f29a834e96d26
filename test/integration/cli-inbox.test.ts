import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import { createPool, type Pool as MysqlPool } from 'mysql2/promise';
import { Pool } from 'pg';
import type { CliIo } from '../../lib/cli/cli-io.js';
import { runCli } from '../../lib/cli/run-cli.js';
import { cliPoolConfig } from '../../lib/cli/cli-inbox.js';
import { boundedPool, cliMysqlPoolConfig } from '../../lib/cli/cli-inbox-mysql.js';
import { MysqlStore } from 'ipn-kit/mysql';
import { PostgresStore } from 'ipn-kit/postgres';
import { RedisStore } from 'ipn-kit/redis';
import { databaseUrl, describeWithService, eventually, mysqlUrl, redisUrl } from '../helpers/services.js';
import { ipnRouter } from '../../lib/index.js';
import { listActions } from '../../lib/delivery/audit.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { CLEANUP_TIMEOUT_MS, dropMysqlInboxes, dropPostgresInboxes } from '../helpers/drop-inboxes.js';

const DAY = 24 * 60 * 60 * 1000;

/**
 * Runs `command` as on a machine whose clock is `ms` ahead of the database's (Date.now() shifted), then
 * restores the clock. `before` is computed on that machine: its dedupe window's start, 7 days before its now.
 */
async function aheadBy<T>(ms: number, command: (before: string) => Promise<T>): Promise<T> {
  const real = Date.now;
  const ahead = jest.spyOn(Date, 'now').mockImplementation(() => real() + ms);
  try {
    return await command(new Date(Date.now() - 7 * DAY).toISOString());
  } finally {
    ahead.mockRestore();
  }
}

/** Runs `ipn-kit inbox ...args` with DATABASE_URL set (unless `env` says otherwise), capturing its output. */
async function inbox(
  args: string[],
  env: CliIo['env'] = { DATABASE_URL: databaseUrl() },
  replayWait?: CliIo['replayWait'],
) {
  const stdout: string[] = [];
  const stderr: string[] = [];
  const code = await runCli(['inbox', ...args], {
    stdout: (line) => stdout.push(line),
    stderr: (line) => stderr.push(line),
    env,
    ...(replayWait === undefined ? {} : { replayWait }),
  });
  return { code, stdout: stdout.join('\n'), stderr: stderr.join('\n') };
}

const lease = () => ({ id: randomUUID(), ms: 60_000 });

describeWithService('PostgreSQL', 'ipn-kit inbox', () => {
  let pool: Pool;
  const tables: string[] = [];
  let sequence = 0;

  /** A migrated table no other test uses, and its store. */
  async function freshStore(): Promise<PostgresStore> {
    const table = `ipn_test_cli_${process.pid}_${randomUUID().slice(0, 8)}`;
    tables.push(table);
    const store = new PostgresStore({ pool, table });
    await store.migrate();
    return store;
  }

  /** Receives a notification and ends its first attempt as `status` says. Keys sort in creation order. */
  async function entry(store: PostgresStore, status: 'received' | 'delivered' | 'failed' | 'dead') {
    sequence += 1;
    const key = `TX.${process.pid}.${String(sequence).padStart(4, '0')}:SUCCESSFUL`;
    const held = lease();
    await store.receive(key, { transaction_id: key.split(':')[0], amount: 500 }, held);
    if (status === 'delivered') await store.settle(key, held.id, { status });
    if (status === 'failed') {
      const nextAttemptAt = new Date(Date.now() + 60_000);
      await store.settle(key, held.id, { status, error: 'listener threw\nat line 3', nextAttemptAt });
    }
    if (status === 'dead') await store.settle(key, held.id, { status, error: 'gave up' });
    return key;
  }

  beforeAll(() => {
    pool = new Pool({ connectionString: databaseUrl(), max: 2 });
    pool.on('error', () => {});
  });

  afterAll(async () => {
    await dropPostgresInboxes(pool, tables);
    await pool.end();
  }, CLEANUP_TIMEOUT_MS);

  test('list prints a table of entries, oldest first, and says how many', async () => {
    const store = await freshStore();
    const keys = [
      await entry(store, 'received'),
      await entry(store, 'delivered'),
      await entry(store, 'failed'),
      await entry(store, 'dead'),
    ];

    const { code, stdout, stderr } = await inbox(['list', '--table', store.table]);

    expect(code).toBe(0);
    expect(stderr).toBe('');
    const lines = stdout.split('\n');
    expect(lines[0]).toMatch(/^KEY +STATUS +ATTEMPTS +RECEIVED +NEXT ATTEMPT +LAST ERROR$/);
    expect(lines.slice(1, 5).map((line) => line.split(/ +/).slice(0, 3))).toEqual([
      [keys[0], 'received', '1'],
      [keys[1], 'delivered', '1'],
      [keys[2], 'failed', '1'],
      [keys[3], 'dead', '1'],
    ]);
    expect(lines[3]).toContain('listener threw at line 3'); // one line per entry
    expect(lines[5]).toBe(`4 entries in ${store.table}`);
  });

  test('list labels a kept unexpected notification: not credited, to check and replay', async () => {
    const store = await freshStore();
    const plain = await entry(store, 'failed');
    sequence += 1;
    const key = `TX.${process.pid}.${String(sequence).padStart(4, '0')}:SUCCESSFUL`;
    const held = lease();
    await store.receive(key, { transaction_id: key.split(':')[0], amount: 500 }, held);
    const century = new Date(Date.now() + 100 * 365 * 24 * 60 * 60_000);
    await store.settle(key, held.id, {
      status: 'failed',
      error: 'unexpected: no expectation',
      nextAttemptAt: century,
    });

    const { code, stdout } = await inbox(['list', '--table', store.table]);

    expect(code).toBe(0);
    const lines = stdout.split('\n');
    expect(lines.find((line) => line.startsWith(key))).toContain(
      'unexpected: not credited, check and replay',
    );
    expect(lines.find((line) => line.startsWith(plain))).not.toContain('not credited');
  });

  test('list labels an entry kept as a conflict; --json and show keep its last error, which says so', async () => {
    const store = await freshStore();
    const plain = await entry(store, 'dead');
    sequence += 1;
    const key = `TX.${process.pid}.${String(sequence).padStart(4, '0')}:FAILED`;
    const held = lease();
    await store.receive(key, { transaction_id: key.split(':')[0], amount: 500 }, held);
    const error = 'conflict: TX:FAILED contradicts the SUCCESSFUL already accepted for this transaction';
    await store.settle(key, held.id, { status: 'dead', error });

    const { code, stdout } = await inbox(['list', '--table', store.table]);

    expect(code).toBe(0);
    const lines = stdout.split('\n');
    expect(lines.find((line) => line.startsWith(key))).toMatch(
      / dead \(conflict: FAILED after an accepted SUCCESSFUL, not emitted as failed\) /,
    );
    expect(lines.find((line) => line.startsWith(plain))).not.toContain('conflict');
    const json = await inbox(['list', '--table', store.table, '--status', 'dead', '--json']);
    const listed = json.stdout
      .split('\n')
      .map((line) => JSON.parse(line) as { key: string; lastError: string });
    expect(listed.find((e) => e.key === key)?.lastError).toBe(error);
    const shown = await inbox(['show', key, '--table', store.table]);
    expect(JSON.parse(shown.stdout)).toMatchObject({ key, status: 'dead', lastError: error });
  });

  test('list --status filters, --limit and --offset page, and it says when more may follow', async () => {
    const store = await freshStore();
    const dead = [await entry(store, 'dead'), await entry(store, 'received'), await entry(store, 'dead')];

    const filtered = await inbox(['list', '--table', store.table, '--status', 'dead']);
    const paged = await inbox(['list', `--table=${store.table}`, '--limit', '1', '--offset', '1']);

    expect(filtered.code).toBe(0);
    expect(filtered.stdout).toContain(dead[0]);
    expect(filtered.stdout).not.toContain(dead[1]);
    expect(filtered.stdout).toContain(dead[2]);
    expect(paged.stdout.split('\n')[1]).toContain(dead[1]);
    expect(paged.stdout).toContain('more may follow: --offset 2');
  });

  test('list --json prints one JSON object per line', async () => {
    const store = await freshStore();
    const key = await entry(store, 'failed');

    const { code, stdout } = await inbox(['list', '--table', store.table, '--json']);

    expect(code).toBe(0);
    const lines = stdout.split('\n');
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0]!)).toMatchObject({
      key,
      status: 'failed',
      attempts: 1,
      lastError: 'listener threw\nat line 3',
      record: { amount: 500 },
      receivedAt: expect.stringMatching(/^\d{4}-\d{2}-\d{2}T/),
    });
  });

  test('show prints one entry as JSON; a missing key exits 1', async () => {
    const store = await freshStore();
    const key = await entry(store, 'dead');

    const shown = await inbox(['show', key, '--table', store.table]);
    const missing = await inbox(['show', 'TX.none:SUCCESSFUL', '--table', store.table]);

    expect(shown.code).toBe(0);
    expect(JSON.parse(shown.stdout)).toMatchObject({ key, status: 'dead', lastError: 'gave up' });
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain("no entry with key 'TX.none:SUCCESSFUL'");
  });

  test('replay <key> makes the entry due again and says the app delivers it', async () => {
    const store = await freshStore();
    const key = await entry(store, 'dead');

    const { code, stdout } = await inbox(['replay', key, '--table', store.table]);

    expect(code).toBe(0);
    expect(stdout).toContain(`${key} is due again (was dead)`);
    expect(stdout).toContain('recovery loop');
    expect(await store.get(key)).toMatchObject({ status: 'received', attempts: 0, leaseUntil: null });
  });

  // The operator checks a kept unexpected copy (`failed`, never due) and replays it; meanwhile the sweep or
  // ipn.reconcile() put the service's record in its place (a forgery kept before its transaction existed, or a
  // copy the record confirms) and the app delivered it. The replay must not run that payment's listeners again:
  // only the entry as the command read it is replayed, as the operator's page does.
  test('replay <key> of a kept copy the app delivered meanwhile replays nothing: the payment is not credited twice', async () => {
    const store = await freshStore();
    sequence += 1;
    const id = `TX.${process.pid}.${String(sequence).padStart(4, '0')}`;
    const key = `${id}:SUCCESSFUL`;
    const held = lease();
    const forged = { transaction_id: id, state: 'SUCCESSFUL', amount: 1, custom_data: 'order-9' };
    await store.receive(key, forged, held);
    const century = new Date(Date.now() + 100 * 365 * DAY);
    const error =
      'unexpected: the notification has no expectation: kept and not credited, replay its key once checked';
    await store.settle(key, held.id, { status: 'failed', error, nextAttemptAt: century });
    // The record's write and its delivery, landing while the command runs (held until it waits for the row).
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(
        `UPDATE "${store.table}" SET record = $2::jsonb, status = 'delivered', delivered_at = now() WHERE key = $1`,
        [key, JSON.stringify({ ...forged, amount: 5000 })],
      );
      const replaying = inbox(['replay', key, '--table', store.table]);
      await eventually('the replay waits for the row', async () => {
        const { rows } = await pool.query<{ waiting: number }>(
          `SELECT count(*)::int AS waiting FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`,
          [`%${store.table}%`],
        );
        return rows[0]!.waiting > 0;
      });
      await client.query('COMMIT');
      const { code, stderr } = await replaying;
      expect(await store.get(key)).toMatchObject({ status: 'delivered', record: { amount: 5000 } });
      expect(code).toBe(1);
      expect(stderr).toContain(`'${key}' changed meanwhile (it was failed, it is delivered now)`);
    } finally {
      await client.query('ROLLBACK').catch(() => undefined);
      client.release();
    }
  });

  test('replay of a missing key, or of a key claimed in at-most-once mode, exits 1 and changes nothing', async () => {
    const store = await freshStore();
    const claimed = `TX.${process.pid}.claimed:SUCCESSFUL`;
    await store.claim(claimed, 1000);

    const missing = await inbox(['replay', 'TX.none:FAILED', '--table', store.table]);
    const marker = await inbox(['replay', claimed, '--table', store.table]);

    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain("no entry with key 'TX.none:FAILED'");
    // A claim is no entry (schema version 7: it is in <table>_claims), and stays as it was.
    expect(marker.code).toBe(1);
    expect(marker.stderr).toContain(`no entry with key '${claimed}'`);
    expect(await store.get(claimed)).toBeUndefined();
    expect(await store.claim(claimed, 1000)).toBe(false);
  });

  test('replay --dead makes every dead entry due again and counts them', async () => {
    const store = await freshStore();
    const dead = [await entry(store, 'dead'), await entry(store, 'dead')];
    const delivered = await entry(store, 'delivered');

    const { code, stdout } = await inbox(['replay', '--dead', '--table', store.table]);

    expect(code).toBe(0);
    expect(stdout).toMatch(/^2 dead entries are due again: .*recovery loop/);
    for (const key of dead) expect(await store.get(key)).toMatchObject({ status: 'received', attempts: 0 });
    expect(await store.get(delivered)).toMatchObject({ status: 'delivered' });
  });

  test('replay --wait prints the progress as the app delivers; exit 1 when some go dead again', async () => {
    const store = await freshStore();
    let healthy = true;
    const app = ipnRouter({
      store,
      delivery: 'at-least-once',
      maxAttempts: 1,
      recoveryIntervalMs: 50,
      logger: quiet,
    });
    app.on('successful', () => {
      if (!healthy) throw new Error('ledger down');
    });
    app.on('error', () => {});
    try {
      const payloads = [uniquePayload(), uniquePayload()];
      const keys = payloads.map((p) => `${String(p.transaction_id)}:${String(p.state)}`);
      for (const [i, payload] of payloads.entries()) {
        const held = lease();
        await store.receive(keys[i]!, payload, held);
        await store.settle(keys[i]!, held.id, { status: 'dead', error: 'gave up' });
      }

      const done = await inbox(['replay', '--dead', '--wait', '--table', store.table]);
      expect(done.code).toBe(0);
      expect(done.stdout).toMatch(/^2 dead entries are due again/);
      expect(done.stdout.split('\n').at(-1)).toBe('replay: 2 of 2 delivered, none waiting');
      for (const key of keys) expect(await store.get(key)).toMatchObject({ status: 'delivered' });

      healthy = false;
      const again = await inbox(['replay', '--status', 'delivered', '--wait', '--table', store.table]);
      expect(again.code).toBe(1);
      expect(again.stdout.split('\n').at(-1)).toBe('replay: 0 of 2 delivered, 2 dead again, none waiting');
      const [audit] = await store.audit.list({ limit: 1 });
      expect(audit).toMatchObject({ action: 'replay-filter', detail: { count: 2 } });
      expect([...(audit!.detail.keys as string[])].sort()).toEqual([...keys].sort());
    } finally {
      await app.close();
    }
  });

  test('replay --wait gives up, exit 1, once nothing moved for its stall time (no app delivers this inbox)', async () => {
    const store = await freshStore();
    const keys = [await entry(store, 'dead'), await entry(store, 'dead')];
    // No app runs on this table: the replayed entries stay due, and nothing ever moves.
    const given = await inbox(['replay', '--dead', '--wait', '--table', store.table], undefined, {
      pollMs: 5,
      stallMs: 60,
    });
    expect(given.code).toBe(1);
    expect(given.stdout.split('\n').slice(1)).toEqual(['replay: 0 of 2 delivered, 2 waiting']);
    expect(given.stderr).toBe(
      "ipn-kit inbox replay --wait: nothing moved in 60 ms: is an app with delivery: 'at-least-once' running on this inbox?",
    );
    for (const key of keys) expect(await store.get(key)).toMatchObject({ status: 'received', attempts: 0 });
    // The replay was kept in the audit trail before the wait began: giving up loses no record.
    const [audit] = await store.audit.list({ limit: 1 });
    expect(audit).toMatchObject({ action: 'replay-dead', detail: { count: 2 } });
  });

  test('replay --wait giving up while delivery is paused says so, not that no app runs', async () => {
    const store = await freshStore();
    await entry(store, 'dead');
    await store.pauseSwitch.write(true);
    const given = await inbox(['replay', '--dead', '--wait', '--table', store.table], undefined, {
      pollMs: 5,
      stallMs: 60,
    });
    expect(given.code).toBe(1);
    expect(given.stderr).toBe(
      'ipn-kit inbox replay --wait: nothing moved in 60 ms: delivery is paused (ipn.pause()): resume it to deliver them',
    );
  });

  test('replay --status --transaction --dry-run counts first; then replays only what matches, paced by --rate', async () => {
    const store = await freshStore();
    const [a, b, c] = [await entry(store, 'dead'), await entry(store, 'dead'), await entry(store, 'dead')];
    const failed = await entry(store, 'failed');
    const ids = [a, b, failed].flatMap((key) => ['--transaction', key.split(':')[0]!]);

    const dry = await inbox(['replay', '--status', 'dead', ...ids, '--dry-run', '--table', store.table]);
    expect(dry).toMatchObject({
      code: 0,
      stdout: expect.stringMatching(/^2 dead entries match in .*dry run/),
    });
    expect(await store.get(a)).toMatchObject({ status: 'dead' });

    const since = (await store.get(a))!.receivedAt.toISOString();
    const future = new Date(Date.now() + 3_600_000).toISOString();
    const none = await inbox(['replay', '--dead', '--since', future, '--table', store.table]);
    expect(none).toMatchObject({ code: 0, stdout: expect.stringMatching(/^0 dead entries are due again/) });

    const done = await inbox([
      'replay',
      '--status',
      'dead',
      ...ids,
      '--since',
      since,
      '--until',
      future,
      '--rate',
      '1',
      '--table',
      store.table,
    ]);
    expect(done).toMatchObject({
      code: 0,
      stdout: expect.stringMatching(
        /^2 dead entries are due again \(2 matched, 1 a second over 2 s\): .*recovery loop/,
      ),
    });
    const [first, second] = [(await store.get(a))!, (await store.get(b))!];
    expect([first.status, second.status]).toEqual(['received', 'received']);
    expect(Math.abs(second.nextAttemptAt.getTime() - first.nextAttemptAt.getTime())).toBeGreaterThanOrEqual(
      900,
    );
    expect(await store.get(c)).toMatchObject({ status: 'dead' });
    expect(await store.get(failed)).toMatchObject({ status: 'failed' });
  });

  test('purge --before deletes delivered entries delivered before the date', async () => {
    const store = await freshStore();
    const old = await entry(store, 'delivered');
    const recent = await entry(store, 'delivered');
    const dead = await entry(store, 'dead');
    await pool.query(`UPDATE "${store.table}" SET delivered_at = '2020-01-01T00:00:00Z' WHERE key = $1`, [
      old,
    ]);

    const { code, stdout } = await inbox(['purge', '--before', '2021-06-01', '--table', store.table]);

    expect(code).toBe(0);
    expect(stdout).toBe(
      `deleted 1 delivered entry delivered before 2021-06-01T00:00:00.000Z from ${store.table}`,
    );
    expect(await store.get(old)).toBeUndefined();
    expect(await store.get(recent)).toBeDefined();
    expect(await store.get(dead)).toBeDefined();
  });

  test('a table that does not exist exits 1, saying to migrate', async () => {
    const { code, stderr } = await inbox(['list', '--table', `ipn_test_cli_missing_${process.pid}`]);

    expect(code).toBe(1);
    expect(stderr).toMatch(/does not exist: run `await store.migrate\(\)`/);

    // A purge counts the claims first: with no claims table it says so, and to migrate.
    const purged = await inbox([
      'purge',
      '--before',
      '2020-01-01',
      '--table',
      `ipn_test_cli_missing_${process.pid}`,
    ]);
    expect(purged.code).toBe(1);
    expect(purged.stderr).toMatch(/nothing was purged .*run `ipn-kit migrate`/);
  });
});

test("the CLI's own pool keeps connections alive and bounds connecting and every query in time", () => {
  // What makes a command fail with a message, instead of hanging, behind a network that drops packets.
  expect(cliPoolConfig('postgres://db/x')).toEqual({
    connectionString: 'postgres://db/x',
    max: 1,
    keepAlive: true,
    connectionTimeoutMillis: 10_000,
    query_timeout: 30_000,
  });
});

describe('ipn-kit inbox usage', () => {
  test.each([
    ['no command', []],
    ['an unknown command', ['drop']],
    ['purge without --before', ['purge']],
    ['purge --before a word', ['purge', '--before', 'yesterday']],
    ['purge --before a day that does not exist', ['purge', '--before', '2024-02-30']],
    ['purge --before a time that does not exist', ['purge', '--before', '2024-02-01T25:00Z']],
    ['purge --before a bare number', ['purge', '--before', '1']],
    ['purge --before with no date', ['purge', '--before']],
    ['list --status that is not a status', ['list', '--status', 'lost']],
    ['list --limit 0', ['list', '--limit', '0']],
    ['list --limit that is not a number', ['list', '--limit', 'ten']],
    ['list --offset -1', ['list', '--offset=-1']],
    ['list with a key', ['list', 'TX.1:SUCCESSFUL']],
    ['show without a key', ['show']],
    ['show with two keys', ['show', 'a:B', 'c:D']],
    ['replay without a key or --dead', ['replay']],
    ['replay with a key and --dead', ['replay', 'TX.1:SUCCESSFUL', '--dead']],
    ['replay with a key and --status', ['replay', 'TX.1:SUCCESSFUL', '--status', 'dead']],
    ['replay --dead and --status failed', ['replay', '--dead', '--status', 'failed']],
    ['replay --since that is not a date', ['replay', '--dead', '--since', 'yesterday']],
    ['replay --rate 0', ['replay', '--dead', '--rate', '0']],
    ['replay --wait with --dry-run', ['replay', '--dead', '--wait', '--dry-run']],
    ['an option of another command', ['show', 'TX.1:SUCCESSFUL', '--json']],
    ['an unknown option', ['list', '--verbose']],
    ['an invalid --table', ['list', '--table', 'inbox; DROP TABLE users']],
  ])('%s exits 2 with the usage, before connecting', async (_case, args) => {
    const { code, stderr, stdout } = await inbox(args, {
      DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none',
    });

    expect(code).toBe(2);
    expect(stderr).toMatch(/^ipn-kit inbox: .+\nusage:/);
    expect(stdout).toBe('');
  });

  test('DATABASE_URL unset exits 2, saying what to set', async () => {
    const { code, stderr } = await inbox(['list'], {});

    expect(code).toBe(2);
    expect(stderr).toMatch(/DATABASE_URL is not set: set it to the connection string/);
  });

  test('an unreachable database exits 1 with the reason', async () => {
    const { code, stderr } = await inbox(['list'], { DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none' });

    expect(code).toBe(1);
    expect(stderr).toMatch(/^ipn-kit inbox list: .*ECONNREFUSED/);
  });

  test.each([
    ['--help', ['--help']],
    ['-h', ['-h']],
    ['help', ['help']],
    ['list --help', ['list', '--help']],
    ['purge -h', ['purge', '-h']],
  ])('%s prints the usage and exits 0', async (_case, args) => {
    const { code, stdout } = await inbox(args, {});

    expect(code).toBe(0);
    expect(stdout).toMatch(/^usage:\n {2}ipn-kit inbox list/);
    expect(stdout).toContain('recovery loop');
  });
});

describeWithService('Redis', 'ipn-kit inbox --redis-url (the RedisStore inbox)', () => {
  const prefix = `ipn-kit-test:cli:${process.pid}:${randomUUID().slice(0, 8)}:`;
  let redis: Redis;
  let store: RedisStore;
  const onRedis = (args: string[]) => inbox([...args, '--redis-url', redisUrl(), '--prefix', prefix], {});

  beforeAll(() => {
    redis = new Redis(redisUrl());
    store = new RedisStore({ client: redis, prefix });
  });
  afterAll(async () => {
    const keys = await redis.keys(`${prefix}*`);
    if (keys.length > 0) await redis.del(...keys);
    redis.disconnect();
  });

  test('lists, shows, replays and purges, without DATABASE_URL', async () => {
    const dead = { id: randomUUID(), ms: 60_000 };
    const done = { id: randomUUID(), ms: 60_000 };
    await store.receive('R.1:SUCCESSFUL', { transaction_id: 'R.1', amount: 1 }, dead);
    await store.receive('R.2:SUCCESSFUL', { transaction_id: 'R.2', amount: 2 }, done);
    await store.settle('R.1:SUCCESSFUL', dead.id, { status: 'dead', error: 'the ledger refused it' });
    await store.settle('R.2:SUCCESSFUL', done.id, { status: 'delivered' });

    const listed = await onRedis(['list', '--status', 'dead', '--json']);
    expect(listed.code).toBe(0);
    expect(listed.stdout.split('\n').map((line) => (JSON.parse(line) as { key: string }).key)).toEqual([
      'R.1:SUCCESSFUL',
    ]);
    const shown = await onRedis(['show', 'R.1:SUCCESSFUL']);
    expect(shown.code).toBe(0);
    expect(JSON.parse(shown.stdout)).toMatchObject({ status: 'dead', lastError: 'the ledger refused it' });
    expect((await onRedis(['show', 'R.9:SUCCESSFUL'])).stderr).toContain(
      `no entry with key 'R.9:SUCCESSFUL' in Redis (prefix ${prefix})`,
    );

    const replayed = await onRedis(['replay', '--dead']);
    expect(replayed).toMatchObject({ code: 0, stdout: expect.stringContaining('1 dead entry is due again') });
    expect((await store.get('R.1:SUCCESSFUL'))?.status).toBe('received');

    const later = new Date(Date.now() + 60_000).toISOString();
    const purged = await onRedis(['purge', '--before', later, '--inside-dedupe-window']);
    expect(purged).toMatchObject({ code: 0, stdout: expect.stringContaining('deleted 1 delivered entry') });
    expect(await store.get('R.2:SUCCESSFUL')).toBeUndefined();
  });

  // The purge's window was measured by this machine's clock, the delivery stamped by Redis's (TIME): a
  // machine two days ahead deleted an entry delivered six days ago, inside the 7 days, without the flag.
  test("purge: the dedupe window is measured by Redis's clock, which stamped the delivery", async () => {
    const lease = { id: randomUUID(), ms: 60_000 };
    await store.receive('R.6:SUCCESSFUL', { transaction_id: 'R.6', amount: 6 }, lease);
    await store.settle('R.6:SUCCESSFUL', lease.id, { status: 'delivered' });
    await redis.zadd(`${prefix}done`, Date.now() - 6 * DAY, 'R.6:SUCCESSFUL'); // delivered six days ago

    const run = await aheadBy(2 * DAY, (before) => onRedis(['purge', '--before', before]));
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('refused to purge');
    expect(await store.get('R.6:SUCCESSFUL')).toMatchObject({ status: 'delivered' });
  });

  // Redis keeps a claim as a key with its own expiry (the app's ttlMs): a purge never deletes it, so a claim
  // that still holds its key neither refuses the purge nor goes with it.
  test('purge: a claim that still holds its key is kept, and does not refuse the purge', async () => {
    expect(await store.claim('R.7:SUCCESSFUL', 30 * DAY, randomUUID())).toBe(true);
    const run = await onRedis(['purge', '--before', new Date(Date.now() - 8 * DAY).toISOString()]);
    expect(run.code).toBe(0);
    expect(await store.claim('R.7:SUCCESSFUL', 30 * DAY, randomUUID())).toBe(false);
  });

  test('--table with --redis-url, or --prefix without it, is a usage error (exit 2)', async () => {
    expect((await onRedis(['list', '--table', 'x'])).code).toBe(2);
    expect((await inbox(['list', '--prefix', 'x'])).code).toBe(2);
  });
});

describeWithService('MariaDB', 'ipn-kit inbox --mysql-url (the MysqlStore inbox)', () => {
  let pool: MysqlPool;
  let store: MysqlStore<MysqlPool>;
  const table = `ipn_test_cli_${process.pid}_${randomUUID().slice(0, 8)}`;
  const onMysql = (args: string[]) => inbox([...args, '--mysql-url', mysqlUrl(), '--table', table], {});

  beforeAll(async () => {
    pool = createPool({ uri: mysqlUrl(), connectionLimit: 2 });
    store = new MysqlStore({ pool, table });
    await store.migrate();
  });
  afterAll(async () => {
    await dropMysqlInboxes(pool, [table]);
    await pool.end();
  }, CLEANUP_TIMEOUT_MS);

  test('lists, shows, replays and purges, without DATABASE_URL', async () => {
    const dead = { id: randomUUID(), ms: 60_000 };
    const failed = { id: randomUUID(), ms: 60_000 };
    const done = { id: randomUUID(), ms: 60_000 };
    await store.receive('M.1:SUCCESSFUL', { transaction_id: 'M.1', amount: 1 }, dead);
    await store.receive('M.2:SUCCESSFUL', { transaction_id: 'M.2', amount: 2 }, done);
    await store.receive('M.3:SUCCESSFUL', { transaction_id: 'M.3', amount: 3 }, failed);
    await store.settle('M.1:SUCCESSFUL', dead.id, { status: 'dead', error: 'the ledger refused it' });
    await store.settle('M.2:SUCCESSFUL', done.id, { status: 'delivered' });
    const nextAttemptAt = new Date(Date.now() + 60_000);
    await store.settle('M.3:SUCCESSFUL', failed.id, { status: 'failed', error: 'not yet', nextAttemptAt });

    const printed = await onMysql(['list']);
    expect(printed).toMatchObject({ code: 0, stderr: '' });
    expect(
      printed.stdout
        .split('\n')
        .slice(1, 4)
        .map((line) => line.split(/ +/).slice(0, 2)),
    ).toEqual([
      ['M.1:SUCCESSFUL', 'dead'],
      ['M.2:SUCCESSFUL', 'delivered'],
      ['M.3:SUCCESSFUL', 'failed'],
    ]);
    expect(printed.stdout).toContain(`3 entries in ${table}`);
    const listed = await onMysql(['list', '--status', 'dead', '--json']);
    expect(listed.code).toBe(0);
    expect(listed.stdout.split('\n').map((line) => (JSON.parse(line) as { key: string }).key)).toEqual([
      'M.1:SUCCESSFUL',
    ]);
    const shown = await onMysql(['show', 'M.1:SUCCESSFUL']);
    expect(shown.code).toBe(0);
    expect(JSON.parse(shown.stdout)).toMatchObject({ status: 'dead', lastError: 'the ledger refused it' });
    const missing = await onMysql(['show', 'M.9:SUCCESSFUL']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain(`no entry with key 'M.9:SUCCESSFUL' in ${table}`);

    const one = await onMysql(['replay', 'M.3:SUCCESSFUL']);
    expect(one).toMatchObject({ code: 0, stdout: expect.stringContaining('is due again (was failed)') });
    expect(await store.get('M.3:SUCCESSFUL')).toMatchObject({ status: 'received', attempts: 0 });
    const replayed = await onMysql(['replay', '--dead']);
    expect(replayed).toMatchObject({ code: 0, stdout: expect.stringContaining('1 dead entry is due again') });
    expect((await store.get('M.1:SUCCESSFUL'))?.status).toBe('received');

    const later = new Date(Date.now() + 60_000).toISOString();
    const purged = await onMysql(['purge', '--before', later, '--inside-dedupe-window']);
    expect(purged).toMatchObject({ code: 0, stdout: expect.stringContaining('deleted 1 delivered entry') });
    expect(await store.get('M.2:SUCCESSFUL')).toBeUndefined();
  });

  test('a table that does not exist exits 1, saying to migrate', async () => {
    const { code, stderr } = await inbox(
      ['list', '--mysql-url', mysqlUrl(), '--table', `ipn_test_cli_missing_${process.pid}`],
      {},
    );

    expect(code).toBe(1);
    expect(stderr).toMatch(/does not exist: run `await store.migrate\(\)`/);
  });

  // The purge's window was measured by this machine's clock, the delivery stamped by the database's
  // (UTC_TIMESTAMP(3)): a machine two days ahead deleted an entry delivered six days ago, without the flag.
  test("purge: the dedupe window is measured by the database's clock, which stamped the delivery", async () => {
    const lease = { id: randomUUID(), ms: 60_000 };
    await store.receive('M.6:SUCCESSFUL', { transaction_id: 'M.6', amount: 6 }, lease);
    await store.settle('M.6:SUCCESSFUL', lease.id, { status: 'delivered' });
    await pool.query(
      `UPDATE \`${table}\` SET delivered_at = UTC_TIMESTAMP(3) - INTERVAL 6 DAY WHERE \`key\` = ?`,
      ['M.6:SUCCESSFUL'],
    );

    const run = await aheadBy(2 * DAY, (before) => onMysql(['purge', '--before', before]));
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('refused to purge');
    expect(await store.get('M.6:SUCCESSFUL')).toMatchObject({ status: 'delivered' });
  });

  // The CLI does not know the app's ttlMs (--ttl-ms, 7 days by default): with an app's 30 days, a purge
  // before 8 days ago deleted a claim made 10 days ago that still held its key, and its resend was credited
  // again. The claims' expires_at, by the database's clock, now refuses it unless asked for.
  test('purge: a claim that still holds its key (the app ttlMs longer than --ttl-ms) refuses it', async () => {
    const claimed = 'M.7:SUCCESSFUL';
    expect(await store.claim(claimed, 30 * DAY, randomUUID())).toBe(true);
    await pool.query(
      `UPDATE \`${table}_claims\` SET claimed_at = UTC_TIMESTAMP(3) - INTERVAL 10 DAY,
         expires_at = UTC_TIMESTAMP(3) + INTERVAL 20 DAY WHERE \`key\` = ?`,
      [claimed],
    );
    const audited = (await listActions(store, { limit: 100 })).length;
    const before = new Date(Date.now() - 8 * DAY).toISOString();

    const refused = await onMysql(['purge', '--before', before]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('1 at-most-once claim made before it still holds its key');
    expect(refused.stderr).toContain('--inside-dedupe-window');
    expect(await store.claim(claimed, 30 * DAY, randomUUID())).toBe(false); // still held: a duplicate
    expect(await listActions(store, { limit: 100 })).toHaveLength(audited); // nothing audited

    const forced = await onMysql(['purge', '--before', before, '--inside-dedupe-window']);
    expect(forced.code).toBe(0);
    expect(await store.claim(claimed, 30 * DAY, randomUUID())).toBe(true); // asked for: it went
  });

  test('an unreachable MySQL exits 1 with the reason', async () => {
    const { code, stderr } = await inbox(['list', '--mysql-url', 'mysql://nobody@127.0.0.1:1/none'], {});

    expect(code).toBe(1);
    expect(stderr).toMatch(/^ipn-kit inbox list: .*ECONNREFUSED/);
  });

  test('a --mysql-url that is no URL exits 2, saying what one looks like', async () => {
    const { code, stderr } = await inbox(['list', '--mysql-url', 'not a url'], {});

    expect(code).toBe(2);
    expect(stderr).toMatch(/--mysql-url is not a MySQL URL \(mysql:\/\/user:password@host:3306\/db\)/);
  });

  test.each([
    ['--mysql-url with --redis-url', ['list', '--mysql-url', 'mysql://x/y', '--redis-url', 'redis://x']],
    ['--prefix with --mysql-url', ['list', '--mysql-url', 'mysql://x/y', '--prefix', 'p:']],
    ['a --table MySQL cannot name', ['list', '--mysql-url', 'mysql://x/y', '--table', 'a.b.c']],
    ['a --mysql-url with no URL', ['list', '--mysql-url']],
  ])('%s is a usage error (exit 2), before connecting', async (_case, args) => {
    const { code, stderr } = await inbox(args, {});

    expect(code).toBe(2);
    expect(stderr).toMatch(/^ipn-kit inbox: .+\nusage:/);
  });

  test("a query of the CLI's that waits on a row lock fails at its bound, and the pool then ends at once", async () => {
    const key = 'M.lock:SUCCESSFUL';
    const held = { id: randomUUID(), ms: 60_000 };
    await store.receive(key, { transaction_id: 'M.lock', amount: 1 }, held);
    const locker = await pool.getConnection();
    const cliPool = createPool(cliMysqlPoolConfig(mysqlUrl()));
    try {
      await locker.query('START TRANSACTION');
      await locker.query(`SELECT 1 FROM \`${table}\` WHERE \`key\` = ? FOR UPDATE`, [key]);
      const cliStore = new MysqlStore({ pool: boundedPool(cliPool, 300), table });

      await expect(cliStore.replay(key)).rejects.toThrow(/Query inactivity timeout/);
      await cliPool.end(); // the timed-out connection was destroyed: nothing holds the end up
    } finally {
      await locker.query('ROLLBACK');
      locker.release();
    }
  });

  test("the server bounds a CLI query's wait on a lock too, in whole seconds", async () => {
    const cliPool = createPool(cliMysqlPoolConfig(mysqlUrl()));
    try {
      const bounded = boundedPool(cliPool, 30_000);
      const [rows] = await bounded.query('SELECT @@SESSION.innodb_lock_wait_timeout AS seconds');
      expect(rows).toEqual([{ seconds: 30 }]);
    } finally {
      await cliPool.end();
    }
  });

  test("the CLI's own mysql2 pool: one connection, kept alive, and a bound on connecting", () => {
    expect(cliMysqlPoolConfig('mysql://db/x')).toEqual({
      uri: 'mysql://db/x',
      connectionLimit: 1,
      enableKeepAlive: true,
      connectTimeout: 10_000,
    });
  });
});
