import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';
import { databaseUrl, describeWithService, eventually, hostAndPort } from './services.js';

/**
 * A transaction-mode PgBouncer in front of PostgreSQL, as Supabase's pooler and Neon's pooled endpoint are:
 * Debian's `pgbouncer` (1.18), pool of 5 server connections per database and user, no startup parameter
 * ignored (node-postgres sends none that PgBouncer does not know, unless told to: `options`,
 * `statement_timeout`), `server_login_retry` of 1 s (15 by default) so a staged restart is short.
 *
 * {@link describeWithPgBouncer} starts one per test file on a free port, its config in a temp dir, in front
 * of `upstream` (PostgreSQL, or a test/helpers/tcp-proxy.ts to it, to stage a restart), and stops it after;
 * with `PGBOUNCER_URL` set, it uses that one instead (the upstream is then whatever it points to).
 */
export interface PgBouncer {
  /** The URL through the pooler, to the database of `DATABASE_URL` as its user. */
  readonly url: string;
  stop(): Promise<void>;
}

/** Debian's path, or the one on PATH. */
function binary(): string | undefined {
  if (existsSync('/usr/sbin/pgbouncer')) return '/usr/sbin/pgbouncer';
  const found = (process.env.PATH ?? '').split(':').find((dir) => existsSync(join(dir, 'pgbouncer')));
  return found === undefined ? undefined : join(found, 'pgbouncer');
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Starts PgBouncer in front of `upstream` (host and port of PostgreSQL); resolves once it answers. */
export async function startPgBouncer(upstream: { host: string; port: number }): Promise<PgBouncer> {
  const target = new URL(databaseUrl());
  const user = decodeURIComponent(target.username || 'postgres');
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'ipn-kit-pgbouncer-'));
  chmodSync(dir, 0o755); // read by the postgres user when the tests run as root
  writeFileSync(join(dir, 'users.txt'), `"${user}" ""\n`, { mode: 0o644 });
  const config = join(dir, 'pgbouncer.ini');
  writeFileSync(
    config,
    [
      '[databases]',
      `* = host=${upstream.host} port=${upstream.port}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      "unix_socket_dir = ''",
      'auth_type = trust',
      `auth_file = ${join(dir, 'users.txt')}`,
      'pool_mode = transaction',
      'default_pool_size = 5',
      'max_client_conn = 500',
      'server_login_retry = 1',
      'ignore_startup_parameters =',
      '',
    ].join('\n'),
    { mode: 0o644 },
  );
  // PgBouncer refuses to run as root: it drops to the postgres user (-u) when started as root.
  const asRoot = process.getuid?.() === 0 ? ['-u', 'postgres'] : [];
  const child: ChildProcess = spawn(binary()!, [...asRoot, config], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  child.stderr?.on('data', (chunk: Buffer) => (log += chunk.toString()));
  const url = `postgres://${encodeURIComponent(user)}@127.0.0.1:${port}${target.pathname}`;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await exited;
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await eventually('PgBouncer answers', async () => {
      if (child.exitCode !== null) throw new Error(`pgbouncer exited (${child.exitCode}): ${log}`);
      const client = new Client({ connectionString: url });
      client.on('error', () => {});
      try {
        await client.connect();
        await client.query('SELECT 1');
        return true;
      } catch {
        return false;
      } finally {
        await client.end().catch(() => {});
      }
    });
  } catch (error) {
    await stop();
    throw error;
  }
  return { url, stop };
}

/**
 * `describe(name, fn)` with a PgBouncer in front of PostgreSQL (or `upstream()`, read in `beforeAll`): `fn`
 * gets `bouncer()`, the running one. Skipped, with the reason printed, when PostgreSQL does not answer or
 * pgbouncer is not installed and `PGBOUNCER_URL` not set; under `CI=true` the file fails instead.
 */
export function describeWithPgBouncer(
  name: string,
  fn: (bouncer: () => PgBouncer) => void,
  upstream: () => { host: string; port: number } | Promise<{ host: string; port: number }> = () =>
    hostAndPort(databaseUrl(), 5432),
): void {
  const given = process.env.PGBOUNCER_URL;
  if (!given && binary() === undefined) {
    const why = 'pgbouncer is not installed (apt-get install pgbouncer) and PGBOUNCER_URL is not set';
    if (process.env.CI === 'true')
      throw new Error(`${why}: CI=true, so "${name}" fails instead of being skipped`);
    console.warn(`${why}: skipping "${name}"`);
    describe.skip(name, () => fn(() => undefined as never));
    return;
  }
  describeWithService('PostgreSQL', name, () => {
    let running: PgBouncer | undefined;
    beforeAll(async () => {
      running = given
        ? { url: given, stop: () => Promise.resolve() }
        : await startPgBouncer(await upstream());
    });
    afterAll(() => running?.stop());
    fn(() => running!);
  });
}
