import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import { createPool, type Pool as MysqlPool } from 'mysql2/promise';
import { MysqlStore } from '../../lib/mysql.js';
import { SqliteStore } from '../../lib/sqlite.js';
import { Pool } from 'pg';
import { ipnRouter, MemoryStore, type DurableStore } from '../../lib/index.js';
import { PostgresStore } from '../../lib/postgres.js';
import { RedisStore } from '../../lib/redis.js';
import type { CliIo } from '../../lib/cli/cli-io.js';
import { runCli } from '../../lib/cli/run-cli.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { postTo, refusingRouter } from '../helpers/refusing-router.js';
import { databaseUrl, describeWithService, eventually, mysqlUrl, redisUrl } from '../helpers/services.js';
import { checkRetentionOptions } from '../../lib/config/retention-options.js';
import { suiteSqliteFile } from '../helpers/sqlite-file.js';

// Retention: the recovery pass (or a drain) that deletes delivered entries after ttlMs also deletes dead
// ones after retention.deadMs and blanks the customer's name and number after retention.personalDataMs.
// Audit: every operator action (replay, purge) is kept with who, when and what, and listed.

const HOUR = 3_600_000;

const router = (store: DurableStore, retention: { deadMs?: number; personalDataMs?: number }) =>
  refusingRouter(store, { ttlMs: HOUR, retention });
const post = postTo;

function retentionScenario(make: () => DurableStore, ready: () => Promise<void> = async () => {}): void {
  test("the customer's data is blanked after personalDataMs (amount and id kept), dead entries deleted after deadMs", async () => {
    await ready();
    const store = make();
    const customer = { customer_name: 'Ada Lovelace', destination: '0700000000', amount: 2500 };
    const paid = uniquePayload({ ...customer });
    const refused = uniquePayload({ ...customer, custom_data: 'refuse' });
    const first = router(store, {});
    expect(await post(first, paid)).toBe(200);
    expect(await post(first, refused)).toBe(200);
    const paidKey = `${String(paid.transaction_id)}:SUCCESSFUL`;
    const refusedKey = `${String(refused.transaction_id)}:SUCCESSFUL`;
    await eventually('delivered', async () => (await store.get(paidKey))?.status === 'delivered');
    await eventually('dead', async () => (await store.get(refusedKey))?.status === 'dead');
    // The defaults (30 days; dead entries kept) touch neither (the pass ran when the entries were taken up).
    expect((await store.get(refusedKey))?.record.customer_name).toBe('Ada Lovelace');
    await first.close();
    const deadAt = (await store.get(refusedKey))!.updatedAt.getTime();
    await eventually('200 ms have passed', () => Date.now() > deadAt + 250);

    // A restart with a short personalDataMs: both kept entries are blanked, nothing is deleted.
    const second = router(store, { personalDataMs: 200 });
    await second.drain(); // its retention runs beside the pass: waited for below
    const blanked = async (key: string) => (await store.get(key))?.record.destination === '';
    await eventually('both blanked', async () => (await blanked(paidKey)) && (await blanked(refusedKey)));
    for (const key of [paidKey, refusedKey]) {
      const entry = await store.get(key);
      expect(entry?.record).toMatchObject({
        customer_name: '',
        destination: '',
        amount: 2500,
        transaction_id: entry?.transactionId,
      });
    }
    await second.close();

    // Another with a short deadMs: the dead entry goes, the delivered one (ttlMs: an hour) stays.
    const third = router(store, { deadMs: 200 });
    await third.drain();
    await eventually('the dead entry deleted', async () => (await store.get(refusedKey)) === undefined);
    expect((await store.get(paidKey))?.status).toBe('delivered');
    await third.close();
  });

  test('recordAction keeps an operator action, listed newest first by ipn.inbox.actions()', async () => {
    await ready();
    const ipn = router(make(), {});
    expect(
      await ipn.inbox.recordAction({ action: 'pause', actor: 'ada', detail: { reason: 'deploy' } }),
    ).toBe(true);
    expect(await ipn.inbox.recordAction({ action: 'resume', actor: ' ', detail: {} })).toBe(true);
    const [latest, earlier] = await ipn.inbox.actions({ limit: 2 });
    expect(latest).toMatchObject({ action: 'resume', actor: 'unknown', detail: {} });
    expect(earlier).toMatchObject({ action: 'pause', actor: 'ada', detail: { reason: 'deploy' } });
    expect(latest!.at).toBeInstanceOf(Date);
    await ipn.close();
  });
}

test('retention options are checked at construction', () => {
  const make = (retention: unknown) => () =>
    ipnRouter({ delivery: 'at-least-once', logger: quiet, retention: retention as { deadMs: number } });
  expect(make({ deadMs: -1 })).toThrow(/retention.deadMs must be a positive number/);
  expect(make({ personalDataMs: 'soon' })).toThrow(/retention.personalDataMs/);
  expect(make({ deadDays: 3 })).toThrow(/unknown retention option deadDays/);
  expect(make({ deadMs: Infinity, personalDataMs: Infinity })).not.toThrow();
});

test('by default a dead entry (a payment never credited) is kept: only the customer data has an age', () => {
  expect(checkRetentionOptions(undefined)).toEqual({
    deadMs: Infinity,
    personalDataMs: 30 * 24 * 60 * 60 * 1000,
  });
  expect(checkRetentionOptions({ deadMs: 1000 })).toEqual({
    deadMs: 1000,
    personalDataMs: 30 * 24 * 60 * 60 * 1000,
  });
});

describe('MemoryStore', () => {
  const store = new MemoryStore();
  retentionScenario(() => store);
});

/** Runs `ipn-kit inbox ...args`, capturing its output. */
async function inbox(args: string[], env: CliIo['env']) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(['inbox', ...args], {
    stdout: (l) => out.push(l),
    stderr: (l) => err.push(l),
    env,
  });
  return { code, stdout: out.join('\n'), stderr: err.join('\n') };
}

/** The CLI's replay and purge are kept as the --actor's (or the OS user's) and listed by `inbox audit`. */
function cliAuditScenario(make: () => DurableStore, cli: (args: string[]) => ReturnType<typeof inbox>): void {
  test('the CLI records replay and purge with --actor, and inbox audit lists them, newest first', async () => {
    const store = make();
    const key = `AUD.${randomUUID().slice(0, 8)}:SUCCESSFUL`;
    expect(
      await store.receive(
        key,
        { transaction_id: key.split(':')[0], state: 'SUCCESSFUL' },
        { id: 'l', ms: 60_000 },
      ),
    ).toBe(true);
    expect((await cli(['replay', key, '--actor', 'ada'])).code).toBe(0);
    expect((await cli(['purge', '--before', '2020-01-01', '--dead'])).code).toBe(0);
    const listed = await cli(['audit', '--json']);
    expect(listed.code).toBe(0);
    const actions = listed.stdout.split('\n').map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(actions.slice(0, 2)).toMatchObject([
      { action: 'purge', detail: { status: 'dead', before: '2020-01-01T00:00:00.000Z', count: 0 } },
      { action: 'replay', actor: 'ada', detail: { key, was: 'received' } },
    ]);
    expect(typeof actions[0]!.actor).toBe('string'); // the OS user
    expect((await cli(['audit'])).stdout).toMatch(/ada {2}replay/);
  });
}

describeWithService('PostgreSQL', 'PostgresStore', () => {
  const table = `ipn_test_ret_${process.pid}_${randomUUID().slice(0, 6)}`;
  const pool = new Pool({ connectionString: databaseUrl(), max: 4, idleTimeoutMillis: 500 });
  pool.on('error', () => {});
  afterAll(async () => {
    await pool.query(
      `DROP TABLE IF EXISTS "${table}", "${table}_expected", "${table}_states", "${table}_audit"`,
    );
    await pool.end();
  });
  const ready = () => new PostgresStore({ pool, table }).migrate();
  retentionScenario(() => new PostgresStore({ pool, table }), ready);
  cliAuditScenario(
    () => new PostgresStore({ pool, table }),
    (args) => inbox([...args, '--table', table], { DATABASE_URL: databaseUrl() }),
  );
});

describeWithService('Redis', 'RedisStore', () => {
  const prefix = `ipn-kit-test:retention:${process.pid}:${randomUUID().slice(0, 8)}:`;
  const client = new Redis(redisUrl(), { lazyConnect: true });
  client.on('error', () => {});
  afterAll(async () => {
    const keys = await client.keys(`${prefix}*`);
    if (keys.length > 0) await client.del(...keys);
    await client.quit();
  });
  retentionScenario(() => new RedisStore({ client, prefix }));
  cliAuditScenario(
    () => new RedisStore({ client, prefix }),
    (args) => inbox([...args, '--redis-url', redisUrl(), '--prefix', prefix], {}),
  );
});

describeWithService('MariaDB', 'MysqlStore', () => {
  const table = `ipn_test_ret_${process.pid}_${randomUUID().slice(0, 6)}`;
  let pool: MysqlPool;
  beforeAll(() => {
    pool = createPool({ uri: mysqlUrl(), connectionLimit: 4 });
  });
  afterAll(async () => {
    await pool.query(
      `DROP TABLE IF EXISTS \`${table}\`, \`${table}_expected\`, \`${table}_states\`, \`${table}_audit\``,
    );
    await pool.end();
  });
  const ready = () => new MysqlStore({ pool, table }).migrate();
  retentionScenario(() => new MysqlStore({ pool, table }), ready);
  cliAuditScenario(
    () => new MysqlStore({ pool, table }),
    (args) => inbox([...args, '--mysql-url', mysqlUrl(), '--table', table], {}),
  );
});

describe('SqliteStore', () => {
  const database = suiteSqliteFile('ipn-kit-retention-');
  const store = new SqliteStore({ database });
  retentionScenario(
    () => store,
    async () => store.migrate(),
  );
});
