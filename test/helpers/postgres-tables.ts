import { randomUUID } from 'node:crypto';
import { Pool } from 'pg';
import { PostgresStore } from 'ipn-kit/postgres';
import { CLEANUP_TIMEOUT_MS, dropPostgresInboxes } from './drop-inboxes.js';
import { databaseUrl } from './services.js';

/**
 * For one describe block: `admin`, a pg Pool over the test database, and `table()`, which names a new inbox
 * table `<prefix>_<pid>_<random>` and migrates it; after the block its tables are dropped and `admin` ended.
 */
export function postgresTables(prefix: string): { admin: Pool; table: () => Promise<string> } {
  const admin = new Pool({ connectionString: databaseUrl() });
  const tables: string[] = [];
  afterAll(async () => {
    await dropPostgresInboxes(admin, tables);
    await admin.end();
  }, CLEANUP_TIMEOUT_MS);
  const table = async (): Promise<string> => {
    const name = `${prefix}_${process.pid}_${randomUUID().slice(0, 8)}`;
    tables.push(name);
    await new PostgresStore({ pool: admin, table: name }).migrate();
    return name;
  };
  return { admin, table };
}
