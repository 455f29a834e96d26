/** The servers the benchmark compares, in the order each round runs them. */
export const VARIANTS = [
  'baseline',
  'node-raw',
  'memory',
  'memory-otel-api',
  'redis',
  'postgres',
  'postgres-ledger',
  'postgres-drizzle',
  'handwritten-ledger',
  'mysql',
  'mysql-ledger',
  'sqlite',
  'sqlite-ledger',
  'node-http',
  'fetch',
] as const;

/** One server variant's name. */
export type Variant = (typeof VARIANTS)[number];

/** A service a variant needs; SQLite is a file in a folder of the run's, which the orchestrator owns too. */
export type ServiceName = 'Redis' | 'PostgreSQL' | 'MariaDB' | 'SQLite';

/**
 * What each variant is, as the table shows it, the service it needs, and the reference it is compared
 * with: the server a partner would write instead of ipn-kit for the same job (issue 27). A reference
 * variant has none; the others are also compared with `baseline`, whatever their reference.
 */
export const VARIANT_INFO: Record<Variant, { label: string; needs?: ServiceName; reference?: Variant }> = {
  baseline: { label: 'Express 5 + express.json(), 200 {ok:true}' },
  'node-raw': { label: 'node:http alone: read the body, JSON.parse, 200 {ok:true}' },
  memory: { label: 'ipnRouter() in Express 5, MemoryStore', reference: 'baseline' },
  'memory-otel-api': {
    label: 'the same as memory, @opentelemetry/api loaded and in use (a diag logger), no tracer provider',
    reference: 'memory',
  },
  redis: { label: 'ipnRouter() in Express 5, RedisStore (ioredis)', needs: 'Redis', reference: 'baseline' },
  postgres: {
    label: 'ipnRouter() in Express 5, PostgresStore (Pool), at-least-once, empty listener',
    needs: 'PostgreSQL',
    reference: 'baseline',
  },
  'postgres-ledger': {
    label: 'the same, listener inserts a ledger row through db (exactly once)',
    needs: 'PostgreSQL',
    reference: 'handwritten-ledger',
  },
  'postgres-drizzle': {
    label: 'the same through Drizzle: drizzleTransactions, tx.insert(ledger) (exactly once)',
    needs: 'PostgreSQL',
    reference: 'handwritten-ledger',
  },
  'handwritten-ledger': {
    label: 'Express 5 + express.json(), INSERT INTO ledger ... ON CONFLICT DO NOTHING (pg Pool), 200',
    needs: 'PostgreSQL',
  },
  mysql: {
    label: 'ipnRouter() in Express 5, MysqlStore (mysql2 pool, MariaDB), at-least-once, empty listener',
    needs: 'MariaDB',
    reference: 'baseline',
  },
  'mysql-ledger': {
    label: 'the same, listener inserts a ledger row through db (exactly once)',
    needs: 'MariaDB',
    reference: 'handwritten-ledger',
  },
  sqlite: {
    label: 'ipnRouter() in Express 5, SqliteStore (better-sqlite3 file), at-least-once, empty listener',
    needs: 'SQLite',
    reference: 'baseline',
  },
  'sqlite-ledger': {
    label: 'the same, listener inserts a ledger row through db (exactly once)',
    needs: 'SQLite',
    reference: 'handwritten-ledger',
  },
  'node-http': { label: 'http.createServer(ipnRouter()), MemoryStore', reference: 'node-raw' },
  fetch: { label: 'ipn.fetch (Web Request/Response) on node:http, MemoryStore', reference: 'baseline' },
};

/**
 * Servers that only the end-to-end comparison runs (bench/e2e.ts): references whose 200 says nothing about
 * the credit (a job queue) or that the per-request table does not need.
 */
export type EndToEndServer = 'by-the-book' | 'graphile-worker';

/** How the orchestrator configures a server process (the BENCH_SERVER environment variable, as JSON). */
export interface ServerConfig {
  variant: Variant | EndToEndServer;
  redisUrl: string;
  /** The run's Redis key prefix. */
  prefix: string;
  databaseUrl: string;
  /**
   * The run's table in PostgreSQL and MariaDB, migrated by the orchestrator, with its ledgers beside it:
   * `<table>_ledger` (no unique key, as the docs' exactly-once example has it) and, in PostgreSQL,
   * `<table>_handwritten` (keyed by transaction id and state, for `handwritten-ledger`, `by-the-book` and
   * `graphile-worker`), `<table>_payloads` (the payloads `by-the-book` keeps) and the schema `<table>_gw`
   * (graphile-worker's, which its server migrates).
   */
  table: string;
  mysqlUrl: string;
  /** The run's SQLite file (in a temp folder of the run's), migrated by the orchestrator. */
  sqliteFile: string;
  /** The folder of the run's build of lib/ (ES modules, `index.js`, `postgres.js`, ...): see build-lib.ts. */
  lib: string;
}

/** What a server process reports when it stops: how many events its router emitted, and its CPU time. */
export interface ServerStats {
  /** CPU time (user and system) the process spent from listening to stopping, in microseconds. */
  cpuMicros: number;
  successful: number;
  duplicate: number;
  invalid: number;
  error: number;
}

/** `REDIS_URL`, or the local Redis (as the tests use). */
export function redisUrl(): string {
  return process.env.REDIS_URL || 'redis://127.0.0.1:6379';
}

/** `MYSQL_URL`, or the local MariaDB's (or MySQL's) `test` database (as the tests use). */
export function mysqlUrl(): string {
  return process.env.MYSQL_URL || 'mysql://root@127.0.0.1:3306/test';
}

/** `DATABASE_URL`, or the local PostgreSQL's `test` database (as the tests use). */
export function databaseUrl(): string {
  return process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';
}
