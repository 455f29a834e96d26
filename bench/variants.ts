/** The servers the benchmark compares, in the order each round runs them. */
export const VARIANTS = [
  'baseline',
  'memory',
  'redis',
  'postgres',
  'postgres-ledger',
  'postgres-drizzle',
  'node-http',
  'fetch',
] as const;

/** One server variant's name. */
export type Variant = (typeof VARIANTS)[number];

/** What each variant is, as the table shows it, and the service it needs. */
export const VARIANT_INFO: Record<Variant, { label: string; needs?: 'Redis' | 'PostgreSQL' }> = {
  baseline: { label: 'Express 5 + express.json(), 200 {ok:true}' },
  memory: { label: 'ipnRouter() in Express 5, MemoryStore' },
  redis: { label: 'ipnRouter() in Express 5, RedisStore (ioredis)', needs: 'Redis' },
  postgres: {
    label: 'ipnRouter() in Express 5, PostgresStore (Pool), at-least-once, empty listener',
    needs: 'PostgreSQL',
  },
  'postgres-ledger': {
    label: 'the same, listener inserts a ledger row through db (exactly once)',
    needs: 'PostgreSQL',
  },
  'postgres-drizzle': {
    label: 'the same through Drizzle: drizzleTransactions, tx.insert(ledger) (exactly once)',
    needs: 'PostgreSQL',
  },
  'node-http': { label: 'http.createServer(ipnRouter()), MemoryStore' },
  fetch: { label: 'ipn.fetch (Web Request/Response) on node:http, MemoryStore' },
};

/** How the orchestrator configures a server process (the BENCH_SERVER environment variable, as JSON). */
export interface ServerConfig {
  variant: Variant;
  redisUrl: string;
  /** The run's Redis key prefix. */
  prefix: string;
  databaseUrl: string;
  /** The run's PostgreSQL table, migrated by the orchestrator. */
  table: string;
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

/** `DATABASE_URL`, or the local PostgreSQL's `test` database (as the tests use). */
export function databaseUrl(): string {
  return process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';
}
