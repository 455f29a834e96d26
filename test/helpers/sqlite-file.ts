import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';

/**
 * A SQLite database in a folder of its own under the OS's temporary folder (named from `prefix`), for the
 * describe block that calls this: closed and deleted after its tests.
 */
export function suiteSqliteFile(prefix: string): Database.Database {
  const folder = mkdtempSync(join(tmpdir(), prefix));
  const database = new Database(join(folder, 'ipn.db'));
  afterAll(() => {
    database.close();
    rmSync(folder, { recursive: true, force: true });
  });
  return database;
}
