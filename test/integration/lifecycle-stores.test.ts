import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import Redis from 'ioredis';
import { Pool } from 'pg';
import { createPool, type Pool as MysqlPool } from 'mysql2/promise';
import { MysqlStore } from '../../lib/mysql.js';
import { PostgresStore } from '../../lib/postgres.js';
import { RedisStore } from '../../lib/redis.js';
import { SqliteStore } from '../../lib/sqlite.js';
import { lifecycleScenarios } from '../helpers/lifecycle-scenarios.js';
import { databaseUrl, describeWithService, mysqlUrl, redisUrl } from '../helpers/services.js';

/**
 * The lifecycle's rules on every networked store, each "instance" a store object of its own over its own
 * client (or pool) on the one database: what two app instances are.
 */
const table = `ipn_test_lfc_${process.pid}_${randomUUID().slice(0, 6)}`;

describeWithService('Redis', 'RedisStore', () => {
  const prefix = `ipn-kit-test:lifecycle:${process.pid}:${randomUUID().slice(0, 8)}:`;
  const clients: Redis[] = [];
  lifecycleScenarios({
    store: () => {
      const client = new Redis(redisUrl());
      client.on('error', () => {});
      clients.push(client);
      return new RedisStore({ client, prefix });
    },
    close: async () => {
      const [first] = clients;
      const keys = first ? await first.keys(`${prefix}*`) : [];
      if (first && keys.length > 0) await first.del(...keys);
      await Promise.all(clients.map((client) => client.quit()));
    },
  });
});

describeWithService('PostgreSQL', 'PostgresStore', () => {
  const pools: Pool[] = [];
  const pool = () => {
    const made = new Pool({ connectionString: databaseUrl(), max: 4 });
    made.on('error', () => {});
    pools.push(made);
    return made;
  };
  lifecycleScenarios({
    store: () => new PostgresStore({ pool: pool(), table }),
    ready: () => new PostgresStore({ pool: pool(), table }).migrate(),
    close: async () => {
      await pools[0]?.query(`DROP TABLE IF EXISTS "${table}", "${table}_expected", "${table}_states"`);
      await Promise.all(pools.map((made) => made.end()));
    },
  });
});

describeWithService('MariaDB', 'MysqlStore', () => {
  const pools: MysqlPool[] = [];
  const pool = () => {
    const made = createPool({ uri: mysqlUrl(), connectionLimit: 4 });
    pools.push(made);
    return made;
  };
  lifecycleScenarios({
    store: () => new MysqlStore({ pool: pool(), table }),
    ready: () => new MysqlStore({ pool: pool(), table }).migrate(),
    close: async () => {
      await pools[0]?.query(`DROP TABLE IF EXISTS \`${table}\`, \`${table}_expected\`, \`${table}_states\``);
      await Promise.all(pools.map((made) => made.end()));
    },
  });
});

describe('SqliteStore', () => {
  const folder = mkdtempSync(join(tmpdir(), 'ipn-lifecycle-'));
  const path = join(folder, 'ipn.db');
  const opened: Database.Database[] = [];
  const store = () => {
    const database = new Database(path);
    opened.push(database);
    return new SqliteStore({ database });
  };
  lifecycleScenarios({
    store,
    ready: () => store().migrate(),
    close: () => {
      for (const database of opened) database.close();
      rmSync(folder, { recursive: true, force: true });
      return Promise.resolve();
    },
  });
});
