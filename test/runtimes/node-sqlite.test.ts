import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { uniquePayload } from '../helpers/payloads.js';
import { eventually } from '../helpers/services.js';
import { packedApp, ROOT } from './packed.js';
import { binary, describeWithRuntime, startServer, type RuntimeServer } from './runtime-process.js';

// SqliteStore on node:sqlite, not better-sqlite3: the runtime's DatabaseSync, given as `database` and
// `connect` (test/runtimes/node-sqlite-app.ts), ipn-kit from the tarball, under Deno and under Bun (this
// machine's Node, 20, has no node:sqlite). This test reads the same file with better-sqlite3 meanwhile, as
// another process of the app would.
function describeOnNodeSqlite(runtime: 'deno' | 'bun', args: (folder: string) => string[]): void {
  describeWithRuntime(runtime, `SqliteStore on node:sqlite under ${runtime}`, () => {
    const folder = mkdtempSync(join(tmpdir(), `ipn-${runtime}-sqlite-`));
    const file = join(folder, 'app.db');
    let server: RuntimeServer | undefined;
    let database: Database.Database | undefined;

    beforeAll(async () => {
      const app = packedApp();
      copyFileSync(join(ROOT, 'test/runtimes/node-sqlite-app.ts'), join(app, 'node-sqlite-app.ts'));
      server = await startServer(binary(runtime), [...args(folder), 'node-sqlite-app.ts'], {
        cwd: app,
        env: { PORT: '0', FILE: file, DENO_NO_UPDATE_CHECK: '1' },
        ready: /listening on http:\/\/[^:/]+:(\d+)/,
      });
      database = new Database(file);
    }, 300_000); // the first run of a change to lib/ packs and installs the tarball

    afterAll(async () => {
      await server?.stop();
      database?.close();
      rmSync(folder, { recursive: true, force: true });
    });

    const post = async (path: string, payload: Record<string, unknown>) => {
      const response = await fetch(`${server!.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(payload),
      });
      return { status: response.status, body: (await response.json()) as Record<string, unknown> };
    };
    const ledgerRows = (id: unknown, via: string) =>
      (
        database!
          .prepare('SELECT count(*) AS n FROM ledger WHERE transaction_id = ? AND via = ?')
          .get(id, via) as { n: number }
      ).n;
    const row = (table: string, id: unknown) =>
      database!
        .prepare(`SELECT status, attempts FROM ${table} WHERE key = ?`)
        .get(`${String(id)}:SUCCESSFUL`) as { status: string; attempts: number } | undefined;

    test('a plain store (at most once): the notification is claimed and delivered, the same again is a duplicate', async () => {
      const payload = uniquePayload();

      expect(await post('/once', payload)).toEqual({ status: 200, body: { ok: true } });
      expect(await post('/once', payload)).toEqual({ status: 200, body: { ok: true, duplicate: true } });

      await eventually('the listener credited', () => ledgerRows(payload.transaction_id, 'once') > 0);
      expect(ledgerRows(payload.transaction_id, 'once')).toBe(1);
      // At most once the claim is a row of <table>_claims (schema version 7), never an inbox entry.
      expect(row('ipn_once', payload.transaction_id)).toBeUndefined();
      const claim = database!
        .prepare('SELECT count(*) AS n FROM ipn_once_claims WHERE key = ?')
        .get(`${String(payload.transaction_id)}:SUCCESSFUL`) as { n: number };
      expect(Number(claim.n)).toBe(1);
    });

    test('a durable inbox (at least once): received, then delivered; a listener that credits through db and fails its first attempt leaves one ledger row', async () => {
      const payload = uniquePayload();

      expect(await post('/', payload)).toEqual({ status: 200, body: { ok: true } });
      expect(row('ipn_inbox', payload.transaction_id)).toBeDefined();
      expect(await post('/', payload)).toEqual({ status: 200, body: { ok: true, duplicate: true } });

      await eventually('delivered', () => row('ipn_inbox', payload.transaction_id)?.status === 'delivered');
      expect(row('ipn_inbox', payload.transaction_id)?.attempts).toBe(2);
      expect(ledgerRows(payload.transaction_id, 'db')).toBe(1);
    });
  });
}

// Deno with the permissions the app needs and no more: a missing one would throw.
describeOnNodeSqlite('deno', (folder) => [
  'run',
  '--allow-net=127.0.0.1',
  '--allow-env=PORT,FILE',
  `--allow-read=${folder}`,
  `--allow-write=${folder}`,
]);
describeOnNodeSqlite('bun', () => ['run']);
