import { parseArgs } from 'node:util';
import { liveClaimsOf, type CliIo, type InboxDatabase, type LiveClaims } from './cli-io.js';
import { messageOf, PurgeWindowError, StoreError } from '../shared/errors.js';
import { onMysql } from './cli-inbox-mysql.js';
import { count, formatTable, parseIsoDate, UsageError } from './cli-inbox-text.js';
import { mysqlTableNames } from '../stores/mysql/mysql-sql.js';
import { inboxSql, tableNames } from '../stores/postgres/postgres-sql.js';
import { PostgresStore, type PgQueryable } from '../stores/postgres/postgres-store.js';
import { RedisStore } from '../stores/redis/redis-store.js';
import type { DeliveryStatus, DurableStore, PurgedStatus } from '../stores/store.js';
import { detailText, listActions, recordAction } from '../delivery/audit.js';
import {
  keptKeys,
  progressText,
  replayMatching,
  replayProgress,
  type ReplayFilter,
} from '../delivery/bulk-replay.js';
import { osActor } from './os-actor.js';
import { endHold } from '../delivery/unexpected.js';
import { checkPurgeWindow } from '../delivery/retention.js';
import { DEFAULT_TTL_MS } from '../config/retention-options.js';

const USAGE = `usage:
  ipn-kit inbox list [--status received|delivered|failed|dead] [--limit N] [--offset N] [--json]
  ipn-kit inbox show <key>
  ipn-kit inbox replay <key>
  ipn-kit inbox replay --dead
  ipn-kit inbox replay [--status S] [--since DATE] [--until DATE] [--transaction ID]... [--rate N] [--dry-run]
                       [--wait]
  ipn-kit inbox purge --before <ISO date> [--ttl-ms N] [--inside-dedupe-window]
  ipn-kit inbox purge --before <ISO date> --dead
  ipn-kit inbox audit [--limit N] [--offset N] [--json]

Reads and repairs the PostgreSQL inbox of ipn-kit/postgres (PostgresStore), with --mysql-url the MySQL
inbox of ipn-kit/mysql (MysqlStore), or with --redis-url the Redis inbox of ipn-kit/redis (RedisStore).
  <key>             transaction_id:state, e.g. EFB.123456:SUCCESSFUL
  --table NAME      the inbox table, name or schema.name (database.name on MySQL; default ipn_inbox)
  --mysql-url URL   the MySQL or MariaDB that holds the inbox (mysql://user:password@host:3306/db) instead
                    of DATABASE_URL's PostgreSQL
  --redis-url URL   the Redis that holds the inbox (redis://host:6379) instead of DATABASE_URL's PostgreSQL
  --prefix TEXT     with --redis-url: the RedisStore's prefix (default ipn-kit:)
  --json            list: one JSON object per line instead of a table
  --dead            replay: every dead entry (the same as --status dead); purge: dead entries gone dead
                    before DATE instead
  --status S        replay: only entries of this status (received, delivered, failed, dead); without it,
                    every entry not yet delivered
  --since DATE      replay: only entries received at or after DATE; --until DATE: received before it
  --transaction ID  replay: only the entries of this transaction (repeat it for several)
  --dry-run         replay: count what matches, replay nothing
  --rate N          replay: how many entries become due per second (default 20, as replayRate)
  --wait            replay: then print the progress until none waits (exit 1 if some went dead again)
  --before DATE     purge: delete delivered entries delivered before DATE (2024-05-01, 2024-05-01T12:00Z),
                    and at-most-once claims made before it (counted with them); a resend of a purged
                    notification is delivered again, so a DATE inside the dedupe window (later than ttlMs
                    ago), or one that would delete a claim still holding its key (its expires_at, set by the
                    app's ttlMs, not yet passed), is refused (exit 1, nothing deleted)
  --ttl-ms N        purge: the app's ttlMs, the dedupe window (default 604800000, 7 days, as the router's)
  --inside-dedupe-window
                    purge: delete delivered entries inside the dedupe window, and claims still holding their
                    keys, all the same (a resend of one is then delivered, credited, again): only once the
                    service can no longer resend them
  --actor NAME      replay, purge: who is recorded in the audit trail (default: the OS user)
replay and purge are recorded in the store's audit trail (who, when, what); audit lists it, newest first.
replay only makes entries due again: your running app's recovery loop (delivery: 'at-least-once')
delivers them. The database is DATABASE_URL (postgres://user:password@host:5432/db).`;

const STATUSES: readonly DeliveryStatus[] = ['received', 'delivered', 'failed', 'dead'];

/**
 * One run of a subcommand against the store (`where` names it in messages), with what it asks of the
 * database itself; resolves the exit code.
 */
type Run = (store: DurableStore, io: CliIo, where: string, database: InboxDatabase) => Promise<number>;

/** An ioredis client: what the CLI creates and disconnects. */
interface RedisClient {
  call(command: string, ...args: Array<string | number>): Promise<unknown>;
  disconnect(): void;
  on(event: 'error', listener: (error: Error) => void): unknown;
}
type RedisConstructor = new (url: string, options: Record<string, unknown>) => RedisClient;

/** A `pg` Pool: what the CLI creates and ends. */
interface PgPool extends PgQueryable {
  end(): Promise<void>;
  on(event: 'error', listener: (error: Error) => void): unknown;
}
type PoolConstructor = new (config: CliPoolConfig) => PgPool;

/** The `pg` pool options the CLI uses: `pg`'s own names. */
export interface CliPoolConfig {
  connectionString: string;
  max: number;
  keepAlive: boolean;
  connectionTimeoutMillis: number;
  query_timeout: number;
}

/**
 * The CLI's own pool: one connection, TCP keep-alive (a connection behind a dropped network is found dead
 * instead of waited on), and time limits on connecting and on each query (client side), so that a command
 * fails with a message instead of hanging. No startup parameter (`statement_timeout`, `options`): a
 * transaction-mode pooler (PgBouncer, Supabase's, Neon's pooled endpoint) refuses the connection for one;
 * the CLI's process ends after the command, which closes its connection.
 */
export function cliPoolConfig(connectionString: string): CliPoolConfig {
  return {
    connectionString,
    max: 1,
    keepAlive: true,
    connectionTimeoutMillis: 10_000,
    query_timeout: 30_000,
  };
}

/**
 * `ipn-kit inbox <list|show|replay|purge>`: reads and repairs a PostgresStore, MysqlStore or RedisStore
 * inbox. Resolves the exit code.
 */
export async function inboxCommand(argv: string[], io: CliIo): Promise<number> {
  let table: string;
  let run: Run;
  let redis: { url: string; prefix: string } | undefined;
  let mysqlUrl: string | undefined;
  try {
    const planned = plan(argv);
    if (planned === 'help') {
      io.stdout(USAGE);
      return 0;
    }
    ({ table, run, redis, mysqlUrl } = planned);
  } catch (error) {
    io.stderr(`ipn-kit inbox: ${messageOf(error)}\n${USAGE}`);
    return 2;
  }
  if (redis !== undefined) return onRedis(redis, run, argv, io);
  if (mysqlUrl !== undefined) return onMysql(mysqlUrl, table, run, argv, io);
  const url = io.env.DATABASE_URL;
  if (url === undefined || url === '') {
    io.stderr(
      'ipn-kit inbox: DATABASE_URL is not set: set it to the connection string of the database that holds ' +
        'the inbox, e.g. DATABASE_URL=postgres://user:password@host:5432/db',
    );
    return 2;
  }
  let Pool: PoolConstructor;
  try {
    Pool = await loadPool();
  } catch (error) {
    io.stderr(
      `ipn-kit inbox: could not load the pg package: install pg (npm install pg): ${messageOf(error)}`,
    );
    return 1;
  }
  // One connection is all a command needs; the pool is ours, so it is ended here whatever happens.
  const pool = new Pool(cliPoolConfig(url));
  pool.on('error', () => {
    // A dropped idle connection: the query in flight reports it; without a listener it would crash the CLI.
  });
  try {
    const database: InboxDatabase = {
      clock: async () => {
        const { rows } = await pool.query('SELECT now() AS now');
        return new Date((rows[0] as { now: Date }).now).getTime();
      },
      liveClaims: async (before) => {
        const { rows } = await pool.query(inboxSql(table).liveClaims, [before]);
        const row = rows[0] as { count: unknown; last_expires: Date | null } | undefined;
        const last = row?.last_expires;
        return liveClaimsOf(row?.count, last == null ? null : new Date(last).getTime(), table);
      },
    };
    return await run(new PostgresStore({ pool, table }), io, table, database);
  } catch (error) {
    io.stderr(`ipn-kit inbox ${argv[0] ?? ''}: ${messageOf(error)}`);
    return 1;
  } finally {
    await pool.end().catch(() => {});
  }
}

/** Runs `run` on the RedisStore inbox at `url`, through an ioredis client of its own (disconnected after). */
async function onRedis(
  redis: { url: string; prefix: string },
  run: Run,
  argv: string[],
  io: CliIo,
): Promise<number> {
  let Redis: RedisConstructor;
  try {
    const loaded = (await import('ioredis')) as unknown as { default?: RedisConstructor };
    Redis = loaded.default ?? (loaded as unknown as RedisConstructor);
  } catch (error) {
    io.stderr(`ipn-kit inbox: could not load the ioredis package: install ioredis: ${messageOf(error)}`);
    return 1;
  }
  // No endless reconnecting: a command that cannot reach Redis fails, and says why.
  const client = new Redis(redis.url, { maxRetriesPerRequest: 1, retryStrategy: () => null });
  client.on('error', () => {});
  try {
    const where = `Redis (prefix ${redis.prefix})`;
    const database: InboxDatabase = {
      clock: async () => {
        const [seconds, micros] = (await client.call('TIME')) as [string, string];
        return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
      },
      // A claim is a key with Redis's own expiry (PX ttlMs): gone when it no longer holds, never purged.
      liveClaims: () => Promise.resolve({ count: 0, until: new Date(0) }),
    };
    return await run(new RedisStore({ client, prefix: redis.prefix }), io, where, database);
  } catch (error) {
    io.stderr(`ipn-kit inbox ${argv[0] ?? ''}: ${messageOf(error)}`);
    return 1;
  } finally {
    client.disconnect();
  }
}

interface Plan {
  table: string;
  run: Run;
  redis?: { url: string; prefix: string };
  mysqlUrl?: string;
}

/** Parses the command line into a table and a run, or `'help'`. @throws UsageError, or parseArgs' TypeError. */
function plan(argv: string[]): Plan | 'help' {
  const [command, ...rest] = argv;
  if (command === undefined) throw new UsageError('missing command: list, show, replay, purge or audit');
  if (command === '--help' || command === '-h' || command === 'help') return 'help';
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    strict: true,
    options: {
      table: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
      status: { type: 'string' },
      limit: { type: 'string' },
      offset: { type: 'string' },
      json: { type: 'boolean' },
      dead: { type: 'boolean' },
      before: { type: 'string' },
      'redis-url': { type: 'string' },
      prefix: { type: 'string' },
      'mysql-url': { type: 'string' },
      actor: { type: 'string' },
      since: { type: 'string' },
      until: { type: 'string' },
      transaction: { type: 'string', multiple: true },
      'dry-run': { type: 'boolean' },
      rate: { type: 'string' },
      wait: { type: 'boolean' },
      'ttl-ms': { type: 'string' },
      'inside-dedupe-window': { type: 'boolean' },
    },
  });
  if (values.help) return 'help';
  const redisUrl = values['redis-url'];
  const mysqlUrl = values['mysql-url'];
  if (redisUrl !== undefined && mysqlUrl !== undefined) {
    throw new UsageError('--redis-url and --mysql-url name two inboxes: give one');
  }
  const table =
    mysqlUrl === undefined
      ? tableNames(values.table ?? 'ipn_inbox', '--table').name
      : mysqlTableNames(values.table ?? 'ipn_inbox', '--table').name;
  if (redisUrl !== undefined && values.table !== undefined) {
    throw new UsageError(
      '--table is for PostgreSQL and MySQL: with --redis-url, name the inbox with --prefix',
    );
  }
  if (redisUrl === undefined && values.prefix !== undefined) {
    throw new UsageError('--prefix is for Redis: give --redis-url too');
  }
  const redis = redisUrl === undefined ? undefined : { url: redisUrl, prefix: values.prefix ?? 'ipn-kit:' };
  const where = ['table', 'redis-url', 'prefix', 'mysql-url'];
  const allowed: Record<string, string[]> = {
    list: [...where, 'status', 'limit', 'offset', 'json'],
    show: where,
    replay: [...where, 'dead', 'status', 'since', 'until', 'transaction', 'dry-run', 'rate', 'wait', 'actor'],
    purge: [...where, 'before', 'dead', 'actor', 'ttl-ms', 'inside-dedupe-window'],
    audit: [...where, 'limit', 'offset', 'json'],
  };
  const known = allowed[command];
  if (known === undefined) throw new UsageError(`unknown command '${command}'`);
  const misplaced = Object.keys(values).filter((option) => !known.includes(option));
  if (misplaced.length > 0) throw new UsageError(`${command} does not take --${misplaced.join(', --')}`);
  const filtered =
    command === 'replay' &&
    ['dead', 'status', 'since', 'until', 'transaction', 'dry-run', 'rate', 'wait'].some(
      (option) => option in values,
    );
  const takes = command === 'show' || (command === 'replay' && !filtered) ? 1 : 0;
  if (values.actor !== undefined && values.actor.trim() === '') throw new UsageError('--actor needs a name');
  const actor = values.actor ?? osActor();
  if (positionals.length !== takes) {
    throw new UsageError(
      takes === 1
        ? `${command} takes one key (transaction_id:state)${command === 'replay' ? ', or filters (--dead, --status, ...)' : ''}`
        : `${command} takes no ${command === 'replay' ? 'key with filters (--dead, --status, ...)' : 'argument'}: got ${positionals.join(' ')}`,
    );
  }
  const key = positionals[0] ?? '';
  const status = values.status;
  if (status !== undefined && !STATUSES.includes(status as DeliveryStatus)) {
    throw new UsageError(`--status must be one of ${STATUSES.join(', ')}, got '${status}'`);
  }
  if (command === 'list') {
    const limit = count('--limit', values.limit ?? '100', 1);
    const offset = count('--offset', values.offset ?? '0', 0);
    const run = list(status as DeliveryStatus | undefined, limit, offset, values.json === true);
    return { table, redis, mysqlUrl, run };
  }
  if (command === 'show') return { table, redis, mysqlUrl, run: show(key) };
  if (command === 'audit') {
    const limit = count('--limit', values.limit ?? '100', 1);
    const offset = count('--offset', values.offset ?? '0', 0);
    return { table, redis, mysqlUrl, run: audit(limit, offset, values.json === true) };
  }
  if (command === 'replay' && filtered) {
    if (values.dead && status !== undefined && status !== 'dead')
      throw new UsageError(`--dead and --status ${status} contradict each other: give one`);
    const filter: ReplayFilter = {
      status: values.dead ? 'dead' : (status as DeliveryStatus | undefined),
      since: values.since === undefined ? undefined : parseIsoDate(values.since, '--since'),
      until: values.until === undefined ? undefined : parseIsoDate(values.until, '--until'),
      transactionIds: values.transaction,
      dryRun: values['dry-run'] === true,
    };
    const rate = count('--rate', values.rate ?? '20', 1);
    const wait = values.wait === true;
    if (wait && filter.dryRun === true)
      throw new UsageError('--wait follows a replay: a --dry-run replays nothing');
    return { table, redis, mysqlUrl, run: recorded(actor, replayWhere(filter, rate, wait)) };
  }
  if (command === 'replay') return { table, redis, mysqlUrl, run: recorded(actor, replay(key)) };
  if (values.before === undefined) {
    throw new UsageError('purge needs --before <ISO date>: the entries delivered before it are deleted');
  }
  const purged = values.dead ? 'dead' : 'delivered';
  const windowed = ['ttl-ms', 'inside-dedupe-window'].filter((option) => option in values);
  if (values.dead && windowed.length > 0) {
    throw new UsageError(
      `--dead purges dead entries, which the dedupe window does not limit: --${windowed.join(', --')} is for delivered ones`,
    );
  }
  const window: PurgeWindow = {
    ttlMs: count('--ttl-ms', values['ttl-ms'] ?? String(DEFAULT_TTL_MS), 1),
    inside: values['inside-dedupe-window'] === true,
  };
  const run = recorded(actor, purge(parseIsoDate(values.before), purged, window));
  return { table, redis, mysqlUrl, run };
}

function list(status: DeliveryStatus | undefined, limit: number, offset: number, json: boolean): Run {
  return async (store, io, where) => {
    const entries = await store.list({ status, limit, offset });
    if (json) {
      for (const entry of entries) io.stdout(JSON.stringify(entry));
      return 0;
    }
    io.stdout(formatTable(entries));
    const more = entries.length === limit ? `; more may follow: --offset ${offset + limit}` : '';
    io.stdout(`${entries.length} ${entries.length === 1 ? 'entry' : 'entries'} in ${where}${more}`);
    return 0;
  };
}

function show(key: string): Run {
  return async (store, io, where) => {
    const entry = await store.get(key);
    if (entry === undefined) {
      io.stderr(`ipn-kit inbox show: no entry with key '${key}' in ${where}`);
      return 1;
    }
    io.stdout(JSON.stringify(entry, null, 2));
    return 0;
  };
}

/** A run of an operator action: its exit code and, when it did something, what to keep in the audit trail. */
type Action = (
  store: DurableStore,
  io: CliIo,
  where: string,
  database: InboxDatabase,
) => Promise<{ code: number; done?: Done; follow?: () => Promise<number> }>;
type Done = { action: string; detail: Record<string, unknown> };

/** Runs `action`, then keeps it in the store's audit trail as `actor`'s: exit 1 when it could not be kept. */
function recorded(actor: string, action: Action): Run {
  return async (store, io, where, database) => {
    const { code, done, follow } = await action(store, io, where, database);
    if (done === undefined) return code;
    let kept = code;
    try {
      if (!(await recordAction(store, { ...done, actor })))
        io.stderr(`ipn-kit inbox: ${where} keeps no audit trail: the ${done.action} was not recorded`);
    } catch (error) {
      io.stderr(
        `ipn-kit inbox: the ${done.action} was done, but not recorded in the audit trail: ${messageOf(error)}`,
      );
      kept = 1;
    }
    // What comes after the action (--wait) comes once it is kept: an interrupted wait loses no record.
    return follow === undefined ? kept : Math.max(kept, await follow());
  };
}

function audit(limit: number, offset: number, json: boolean): Run {
  return async (store, io, where) => {
    const actions = await listActions(store, { limit, offset });
    for (const entry of actions) {
      io.stdout(
        json
          ? JSON.stringify(entry)
          : `${entry.at.toISOString()}  ${entry.actor}  ${entry.action}  ${detailText(entry.detail)}`,
      );
    }
    if (!json)
      io.stdout(
        `${actions.length} ${actions.length === 1 ? 'action' : 'actions'} in the audit trail of ${where}`,
      );
    return 0;
  };
}

function replay(key: string): Action {
  return async (store, io, where) => {
    const entry = await store.get(key);
    if (entry === undefined) {
      io.stderr(`ipn-kit inbox replay: no entry with key '${key}' in ${where}`);
      return { code: 1 };
    }
    // A store of your own may keep a key claimed in at-most-once mode as an entry without a record (the SQL
    // stores keep claims apart since schema version 7): marking it due would deliver an empty record.
    if (Object.keys(entry.record).length === 0) {
      io.stderr(
        `ipn-kit inbox replay: '${key}' holds no notification (it was claimed in at-most-once mode): there is ` +
          'nothing to deliver again',
      );
      return { code: 1 };
    }
    // A kept unexpected notification still under its hold lease (a crash between its two writes): a replay
    // keeps a live lease, so without this it would stay undelivered for the hold's hundred years.
    const ended = await endHold(store, key);
    // Only the entry as it was read (its hold just ended: `failed`), checked in the store's own write, as the
    // operator's page does: a kept copy that the sweep or ipn.reconcile() delivered meanwhile (the service's
    // record confirming it, or put in its place) was delivered a second time, its payment credited twice.
    const from: DeliveryStatus[] = ended ? [entry.status, 'failed'] : [entry.status];
    if (!(await store.replay(key, 0, from))) {
      const now = await store.get(key);
      io.stderr(
        now === undefined
          ? `ipn-kit inbox replay: '${key}' was deleted meanwhile`
          : `ipn-kit inbox replay: '${key}' changed meanwhile (it was ${entry.status}, it is ${now.status} now): ` +
              'nothing replayed; check it again, and replay it again if it is still to deliver',
      );
      return { code: 1 };
    }
    io.stdout(`${key} is due again (was ${entry.status}): ${RECOVERY}`);
    return { code: 0, done: { action: 'replay', detail: { key, was: entry.status } } };
  };
}

/** How often `replay --wait` reads where the replayed entries stand. */
const WAIT_POLL_MS = 1_000;
/** `replay --wait` gives up when nothing moved for this long (no app delivers the inbox?). */
const WAIT_STALL_MS = 5 * 60_000;

/**
 * `replay --wait`: prints the replay's progress each time it moves, until no entry waits. Exit 0 when every
 * one was delivered (or purged meanwhile), 1 when some went dead again or nothing moved for 5 minutes.
 */
function waitFor(store: DurableStore, io: CliIo, keys: readonly string[]): () => Promise<number> {
  return async () => {
    let last = '';
    let moved = Date.now();
    for (;;) {
      const progress = await replayProgress(store, keys);
      const { pollMs, stallMs } = io.replayWait ?? { pollMs: WAIT_POLL_MS, stallMs: WAIT_STALL_MS };
      const line = progressText(progress);
      if (line !== last) {
        io.stdout(`replay: ${line}`);
        [last, moved] = [line, Date.now()];
      }
      if (progress.waiting === 0) return progress.dead > 0 ? 1 : 0;
      if (Date.now() - moved >= stallMs) {
        const paused = await store.pauseSwitch?.read().catch(() => false);
        io.stderr(
          `ipn-kit inbox replay --wait: nothing moved in ${waited(stallMs)}: ` +
            (paused === true
              ? 'delivery is paused (ipn.pause()): resume it to deliver them'
              : "is an app with delivery: 'at-least-once' running on this inbox?"),
        );
        return 1;
      }
      await new Promise((resolve) => setTimeout(resolve, pollMs));
    }
  };
}

/** A wait in words: `5 minutes`, or `250 ms` under a minute. */
function waited(ms: number): string {
  return ms >= 60_000 ? `${ms / 60_000} minute${ms === 60_000 ? '' : 's'}` : `${ms} ms`;
}

/** `replay --dead`, `--status`, `--since`...: the router's bulk replay, paced at `rate` a second. */
function replayWhere(filter: ReplayFilter, rate: number, wait: boolean): Action {
  return async (store, io, where) => {
    const { matched, replayed, keys } = await replayMatching(store, filter, rate);
    if (filter.dryRun === true) {
      io.stdout(
        `${matched} ${filter.status ?? ''}${filter.status ? ' ' : ''}${matched === 1 ? 'entry matches' : 'entries match'} in ${where} (dry run: nothing replayed)`,
      );
      return { code: 0 }; // a count changes nothing: not an action to keep
    }
    const paced = replayed > rate ? `, ${rate} a second over ${Math.ceil(replayed / rate)} s` : '';
    const extra = matched !== replayed || paced !== '' ? ` (${matched} matched${paced})` : '';
    const entries = replayed === 1 ? 'entry is' : 'entries are';
    io.stdout(
      `${replayed} ${filter.status ?? ''}${filter.status ? ' ' : ''}${entries} due again${extra}: ${RECOVERY}`,
    );
    const only = Object.entries(filter).filter(([name, value]) => value !== undefined && name !== 'dryRun');
    const dead = only.length === 1 && filter.status === 'dead';
    const detail = dead
      ? { count: replayed, ...keptKeys(keys) }
      : { filter: Object.fromEntries(only), matched, count: replayed, ...keptKeys(keys) };
    const follow = wait && keys.length > 0 ? waitFor(store, io, keys) : undefined;
    return { code: 0, done: { action: dead ? 'replay-dead' : 'replay-filter', detail }, follow };
  };
}

const RECOVERY =
  "the running app's recovery loop (delivery: 'at-least-once') delivers it; nothing is delivered by this command";

/** The dedupe window a purge of delivered entries keeps out of: the app's `ttlMs`, and whether to go in. */
interface PurgeWindow {
  ttlMs: number;
  inside: boolean;
}

/** How the refusal of a purge inside the dedupe window says to do it anyway. */
const PURGE_ANYWAY =
  'add --inside-dedupe-window (give --ttl-ms N if your app sets another ttlMs than the default 7 days)';

function purge(before: Date, status: PurgedStatus, window: PurgeWindow): Action {
  return async (store, io, where, database) => {
    // Thrown: the command's catch says it and exits 1, nothing deleted and nothing recorded. Asked for, the
    // audit trail says insideDedupeWindow only of a purge that went inside the window.
    let entered = false;
    try {
      const now = status === 'delivered' ? await database.clock() : Date.now();
      if (!Number.isFinite(now)) throw new StoreError(`${where}: the database's clock answered no time`);
      checkPurgeWindow(before, status, window.ttlMs, false, PURGE_ANYWAY, now);
    } catch (error) {
      if (!window.inside || !(error instanceof PurgeWindowError)) throw error;
      entered = true;
    }
    // The claims this purge deletes may hold their keys longer than --ttl-ms says: each one's expires_at knows.
    // Asked for, they go (clearing the claims left by an at-most-once crash), and the purge went inside their
    // window, whatever --ttl-ms says of the date: the audit trail says so.
    if (status === 'delivered') {
      const live = await database.liveClaims(before).catch((error: unknown) => {
        throw new StoreError(
          `${where}: could not count the at-most-once claims made before ${before.toISOString()}, so nothing ` +
            'was purged (an inbox not yet migrated has no claims table: run `ipn-kit migrate`, or ' +
            `\`await store.migrate()\`, once): ${messageOf(error)}`,
          { cause: error },
        );
      });
      if (live.count > 0 && window.inside) entered = true;
      else if (live.count > 0) {
        io.stderr(liveClaimsText(before, live));
        return { code: 1 }; // nothing deleted, nothing to keep in the audit trail
      }
    }
    // The count above is a warning, not a guard: a claim committed after it (its claimed_at is its transaction's
    // start) would be deleted by a delete that did not check each claim itself.
    const purged = window.inside
      ? await store.purge(before, status, { insideDedupeWindow: true })
      : await store.purge(before, status);
    const how = status === 'dead' ? 'gone dead' : 'delivered';
    io.stdout(
      `deleted ${purged} ${status} ${purged === 1 ? 'entry' : 'entries'} ${how} before ${before.toISOString()} ` +
        `from ${where}`,
    );
    const detail = {
      status,
      before: before.toISOString(),
      count: purged,
      ...(entered ? { insideDedupeWindow: true } : {}),
    };
    return { code: 0, done: { action: 'purge', detail } };
  };
}

/**
 * What refuses a purge of delivered entries that would delete `live` at-most-once claims still holding their
 * key (until `until`, the last of them): the CLI does not know the app's `ttlMs` (`--ttl-ms` is 7 days unless
 * given), but each claim's `expires_at`, set by it, does.
 */
function liveClaimsText(before: Date, { count, until }: LiveClaims): string {
  const one = count === 1;
  return (
    `ipn-kit inbox purge: refused to purge before ${before.toISOString()}: ${count} at-most-once ` +
    `${one ? 'claim' : 'claims'} made before it still ${one ? 'holds its key' : 'hold their keys'} (until ` +
    `${until.toISOString()} by the database's clock: made under a longer ttlMs than --ttl-ms, your app's ` +
    `now or earlier), and a resend of ${one ? 'its notification' : 'their notifications'} would be ` +
    `delivered, and credited, again. Nothing ` +
    `was deleted. Purge again after ${until.toISOString()}, or, once you know the service can no longer ` +
    `resend ${one ? 'it' : 'them'}, add --inside-dedupe-window`
  );
}

/** Loads `pg` only now: ipn-kit does not depend on it, and the rest of the CLI works without it. */
export async function loadPool(): Promise<PoolConstructor> {
  const pg = (await import('pg')) as unknown as {
    Pool?: PoolConstructor;
    default?: { Pool?: PoolConstructor };
  };
  const Pool = pg.Pool ?? pg.default?.Pool;
  if (typeof Pool !== 'function') throw new Error('the pg module has no Pool');
  return Pool;
}
