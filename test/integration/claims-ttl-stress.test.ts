import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { createPool, type Pool as MysqlPool } from 'mysql2/promise';
import { Pool } from 'pg';
import { MysqlStore } from '../../lib/mysql.js';
import { PostgresStore } from '../../lib/postgres.js';
import { SqliteStore } from '../../lib/sqlite.js';
import type { DurableStore } from '../../lib/index.js';
import { CLEANUP_TIMEOUT_MS } from '../helpers/drop-inboxes.js';
import { successfulPayload } from '../helpers/payloads.js';
import { databaseUrl, describeWithService, mysqlUrl } from '../helpers/services.js';

type Store = DurableStore & { migrate(): Promise<void> };
const newKey = (): string => `EFB.${randomUUID().slice(0, 12)}:SUCCESSFUL`;
const recordOf = (key: string) => successfulPayload({ transaction_id: key.slice(0, key.lastIndexOf(':')) });
const lease = () => ({ id: randomUUID(), ms: 60_000 });
const outcome = (p: boolean | Promise<boolean>): Promise<boolean | string> =>
  Promise.resolve(p).then(
    (v) => v,
    (e: unknown) => `error: ${String((e as { message?: unknown }).message)}`,
  );

/**
 * Claims (at most once) of one key from several instances (pools, connections) at once, around their
 * ttlMs: a claim taken over after its expiry is taken over by exactly one, and a claim and a receive of
 * one key are never both first.
 */
function stress(stores: () => Store[], expire: () => Promise<void>): void {
  test('many instances claim expired keys at once: exactly one wins each, round after round', async () => {
    const all = stores();
    const keys = Array.from({ length: 6 }, newKey);
    for (const key of keys) expect(await all[0]!.claim(key, 60_000, randomUUID())).toBe(true);
    for (let round = 0; round < 6; round += 1) {
      await expire();
      const results = await Promise.all(
        keys.map((key) => Promise.all(all.map((s) => outcome(s.claim(key, 60_000, randomUUID()))))),
      );
      // A claim that lost a lock race (MariaDB under load: a deadlock, or a lock wait cut short) fails as a
      // store failure (503, resent): allowed, but never two winners, and one whenever no claim of it failed.
      const failures = results.map((r) => r.filter((v): v is string => typeof v === 'string'));
      expect(failures.flat().filter((f) => !/Deadlock|Lock wait timeout/.test(f))).toEqual([]);
      const wins = results.map((r) => r.filter((v) => v === true).length);
      const wrong = keys.filter((_, i) => wins[i]! > 1 || (wins[i] === 0 && failures[i]!.length === 0));
      expect(wrong).toEqual([]);
    }
  }, 60_000);

  /** How many of the claims (even instances) and receives (odd ones) of each key, all at once, were first. */
  const firsts = async (all: Store[], keys: string[]): Promise<number[]> => {
    const results = await Promise.all(
      keys.map((key) =>
        Promise.all(
          all.map((s, i) =>
            outcome(
              i % 2 === 0 ? s.claim(key, 60_000, randomUUID()) : s.receive(key, recordOf(key), lease()),
            ),
          ),
        ),
      ),
    );
    return results.map((r) => r.filter((v) => v === true).length);
  };

  test('claims and receives of expired keys at once: at most one first per key', async () => {
    const all = stores();
    const keys = Array.from({ length: 8 }, newKey);
    for (const key of keys) expect(await all[0]!.claim(key, 60_000, randomUUID())).toBe(true);
    await expire();
    const twice = (await firsts(all, keys)).flatMap((n, i) => (n > 1 ? [`${keys[i]}: ${n} firsts`] : []));
    expect(twice).toEqual([]);
  }, 60_000);

  test('claims and receives of fresh keys at once: at most one first per key, round after round', async () => {
    const all = stores();
    for (let round = 0; round < 5; round += 1) {
      const keys = Array.from({ length: 8 }, newKey);
      const twice = (await firsts(all, keys)).flatMap((n, i) => (n > 1 ? [`${keys[i]}: ${n} firsts`] : []));
      expect(twice).toEqual([]);
    }
  }, 60_000);

  test('ttlMs edges', async () => {
    const [s] = stores();
    for (const bad of [0, -1, Number.NaN, '5' as unknown as number, undefined as unknown as number])
      await expect(s!.claim(newKey(), bad, randomUUID())).rejects.toThrow(TypeError);
    for (const ok of [1, 0.5, 1e-9, 1e20, Number.POSITIVE_INFINITY, Number.MAX_SAFE_INTEGER])
      expect(await outcome(s!.claim(newKey(), ok, randomUUID()))).toBe(true);
    const key = newKey();
    const token = randomUUID();
    expect(await s!.claim(key, 1e20, token)).toBe(true);
    expect(await s!.claim(key, 1e20, token)).toBe(true);
    expect(await s!.claim(key, 1, randomUUID())).toBe(false);
  }, 60_000);
}

describeWithService('PostgreSQL', 'PostgreSQL: claim ttl stress', () => {
  const pools = Array.from({ length: 5 }, () => new Pool({ connectionString: databaseUrl(), max: 3 }));
  for (const p of pools) p.on('error', () => {});
  const table = `ipn_test_stress6_${process.pid}`;
  beforeAll(async () => {
    await new PostgresStore({ pool: pools[0]!, table }).migrate();
  });
  afterAll(async () => {
    await pools[0]!.query(`DROP TABLE IF EXISTS "${table}" CASCADE`);
    await pools[0]!.query(`DROP TABLE IF EXISTS "${table}_claims" CASCADE`);
    for (const p of pools) await p.end();
  }, CLEANUP_TIMEOUT_MS);
  stress(
    () => pools.map((pool) => new PostgresStore({ pool, table })),
    async () => {
      await pools[0]!.query(`UPDATE "${table}_claims" SET expires_at = now() - interval '1 second'`);
    },
  );
});

describeWithService('MariaDB', 'MySQL: claim ttl stress', () => {
  let pools: MysqlPool[] = [];
  const table = `ipn_test_stress6_${process.pid}`;
  beforeAll(async () => {
    pools = Array.from({ length: 5 }, () => createPool({ uri: mysqlUrl(), connectionLimit: 3 }));
    await new MysqlStore({ pool: pools[0]!, table }).migrate();
  });
  afterAll(async () => {
    const [rows] = await pools[0]!.query(
      "SELECT table_name AS name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE CONCAT(?, '%')",
      [table],
    );
    for (const row of rows as Array<{ name: string }>)
      await pools[0]!.query(`DROP TABLE IF EXISTS \`${row.name}\``);
    for (const p of pools) await p.end();
  }, CLEANUP_TIMEOUT_MS);
  stress(
    () => pools.map((pool) => new MysqlStore({ pool, table })),
    async () => {
      await pools[0]!.query(
        `UPDATE \`${table}_claims\` SET expires_at = UTC_TIMESTAMP(3) - INTERVAL 1 SECOND`,
      );
    },
  );
});

describe('SQLite: claim ttl stress', () => {
  const folder = mkdtempSync(join(tmpdir(), 'ipn-kit-stress6-'));
  const file = join(folder, 'ipn.db');
  const databases = Array.from({ length: 4 }, () => new Database(file));
  for (const d of databases) d.pragma('busy_timeout = 5000');
  const table = 'ipn_stress';
  beforeAll(async () => {
    await new SqliteStore({ database: databases[0]!, table }).migrate();
  });
  afterAll(() => {
    for (const d of databases) d.close();
    rmSync(folder, { recursive: true, force: true });
  });
  stress(
    () => databases.map((database) => new SqliteStore({ database, table })),
    () => {
      databases[0]!.prepare(`UPDATE "${table}_claims" SET expires_at = ?`).run(Date.now() - 1000);
      return Promise.resolve();
    },
  );
});
