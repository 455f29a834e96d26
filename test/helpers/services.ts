import { execFileSync } from 'node:child_process';

/**
 * The real services the integration suites talk to, and how a suite is skipped when one is not running.
 *
 * Jest loads test files as CommonJS, where a top-level `await` is not available, and `describe` must be
 * called while the file loads: so whether a service answers is found out synchronously, at load time, by a
 * child process that connects with the real client and runs one command (`execFileSync`, at most 10 s). The
 * answer is cached per file. Then {@link describeWithService} declares the suite with `describe`, or with
 * `describe.skip` and a `console.warn` naming the URL and the error: skipped tests show as skipped in jest's
 * summary, never as passed. Under `CI=true` an unreachable service throws instead, so the file fails to run:
 * CI must not go green by skipping the suites that matter.
 *
 * @example
 * describeWithService('Redis', 'RedisStore', () => {
 *   test('...', async () => {});
 * });
 */

/** `REDIS_URL`, or the local Redis. */
export function redisUrl(): string {
  return process.env.REDIS_URL || 'redis://127.0.0.1:6379';
}

/** `DATABASE_URL`, or the local PostgreSQL's `test` database. */
export function databaseUrl(): string {
  return process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';
}

/** `MYSQL_URL`, or the local MySQL (or MariaDB)'s `test` database. */
export function mysqlUrl(): string {
  return process.env.MYSQL_URL || 'mysql://root@127.0.0.1:3306/test';
}

/** A service some suites need. */
export type Service = 'Redis' | 'PostgreSQL' | 'MariaDB';

/** The environment variable that points the suites at each service. */
const URL_VARIABLES: Record<Service, string> = {
  Redis: 'REDIS_URL',
  PostgreSQL: 'DATABASE_URL',
  MariaDB: 'MYSQL_URL',
};

/**
 * Each probe connects with the client the tests use (resolved by the parent, so the child finds it whatever
 * its working directory), runs one command and exits 0; or prints why not and exits 1. `PROBE_URL` and
 * `PROBE_CLIENT` come through the environment, so no URL is ever quoted into code.
 */
const PROBES: Record<Service, { url: () => string; client: string; script: string }> = {
  Redis: {
    url: redisUrl,
    client: 'ioredis',
    script: `
      const Redis = require(process.env.PROBE_CLIENT);
      const redis = new Redis(process.env.PROBE_URL, {
        lazyConnect: true, connectTimeout: 3000, maxRetriesPerRequest: 0, retryStrategy: () => null,
      });
      // connect() rejects with "Connection is closed."; the 'error' event has the cause (ECONNREFUSED ...).
      let cause;
      redis.on('error', (error) => { cause ??= error; });
      redis.connect().then(() => redis.ping()).then(
        () => redis.disconnect(),
        (error) => { console.error((cause ?? error).message); process.exit(1); },
      );`,
  },
  PostgreSQL: {
    url: databaseUrl,
    client: 'pg',
    script: `
      const { Client } = require(process.env.PROBE_CLIENT);
      const client = new Client({ connectionString: process.env.PROBE_URL, connectionTimeoutMillis: 3000 });
      client.on('error', () => {});
      client.connect().then(() => client.query('SELECT 1')).then(
        () => client.end(),
        (error) => { console.error(error.message); process.exit(1); },
      );`,
  },
  // MySQL 8 or MariaDB: the store supports both; the suites run against whichever MYSQL_URL points at.
  MariaDB: {
    url: mysqlUrl,
    client: 'mysql2/promise',
    script: `
      const { createConnection } = require(process.env.PROBE_CLIENT);
      createConnection({ uri: process.env.PROBE_URL, connectTimeout: 3000 }).then(
        (connection) => connection.query('SELECT 1').then(() => connection.end()),
      ).catch((error) => { console.error(error.message); process.exit(1); });`,
  },
};

const reasons = new Map<Service, string | null>();

/** Why `service` cannot be reached (`null` when it can), probed once per test file. */
export function unreachable(service: Service): string | null {
  const known = reasons.get(service);
  if (known !== undefined) return known;
  const probe = PROBES[service];
  let reason: string | null = null;
  try {
    execFileSync(process.execPath, ['-e', probe.script], {
      env: { ...process.env, PROBE_URL: probe.url(), PROBE_CLIENT: require.resolve(probe.client) },
      stdio: ['ignore', 'ignore', 'pipe'],
      encoding: 'utf8',
      timeout: 10_000,
    });
  } catch (error) {
    const { stderr, message } = error as { stderr?: string; message: string };
    reason = stderr?.trim() || message;
  }
  reasons.set(service, reason);
  return reason;
}

/**
 * `describe(name, fn)` when `service` answers. Otherwise: under `CI=true`, throws (the file fails); else warns
 * why and declares the suite with `describe.skip`.
 */
export function describeWithService(service: Service, name: string, fn: () => void): void {
  const reason = unreachable(service);
  if (reason === null) {
    describe(name, fn);
    return;
  }
  const where = `${service} at ${redact(PROBES[service].url())} is unreachable (${reason})`;
  if (process.env.CI === 'true') {
    throw new Error(`${where}: CI=true, so "${name}" fails instead of being skipped`);
  }
  console.warn(`${where}: skipping "${name}". Start ${service}, or point ${URL_VARIABLES[service]} at one.`);
  describe.skip(name, fn);
}

/** The URL without its password, for messages. */
export function redact(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== '') parsed.password = '***';
    return parsed.toString();
  } catch {
    return '(an unparsable URL)';
  }
}

/** `url` (a service's) with its host and port replaced: how a client is pointed at a proxy. */
export function viaPort(url: string, port: number): string {
  const parsed = new URL(url);
  parsed.hostname = '127.0.0.1';
  parsed.port = String(port);
  return parsed.toString();
}

/** The host and port `url` points to. */
export function hostAndPort(url: string, defaultPort: number): { host: string; port: number } {
  const parsed = new URL(url);
  return { host: parsed.hostname || '127.0.0.1', port: Number(parsed.port || defaultPort) };
}

/**
 * Polls `condition` every 10 ms until it holds; rejects, naming `what`, if it never does within 1,000 polls
 * (about 10 s), or within `withinMs` when given: for waits on other processes (a child app starting its
 * ORM, a fleet of apps), which a loaded machine slows far more than work in this one.
 */
export async function eventually(
  what: string,
  condition: () => boolean | Promise<boolean>,
  withinMs?: number,
): Promise<void> {
  const until = withinMs === undefined ? undefined : Date.now() + withinMs;
  for (let tries = 0; until === undefined ? tries < 1_000 : Date.now() < until; tries += 1) {
    if (await condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`timed out waiting until ${what}`);
}
