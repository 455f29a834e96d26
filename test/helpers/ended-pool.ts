import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import { Pool } from 'pg';
import type { MemoryStore, Store } from 'ipn-kit';
import { RedisStore } from 'ipn-kit/redis';
import { PostgresStore } from '../../lib/postgres.js';
import { CLEANUP_TIMEOUT_MS, dropPostgresInboxes } from './drop-inboxes.js';
import { databaseUrl, redisUrl } from './services.js';
import { latch, type Session } from './verified-payments.js';

// The host's shutdown after ipn.close() resolved: the store's connection (its pool) ended, every call after
// it failing as a pg Pool's does; for the tests of what close() waits for.

/** What a test makes of the store's claims: `undefined` claims as the data does. */
export type Claim = (key: string, claim: () => boolean) => boolean | Promise<boolean> | undefined;

/**
 * `data` seen through a pool the host ends once `ipn.close()` resolved (the store's `close()` here): every
 * call after it throws, the lifecycle's and the expectations' too. A claim started before that still lands
 * (a query in flight on a checked-out connection); `claim` lets a test hold or lose its answer.
 */
export function pooled(data: MemoryStore, claim: Claim = () => undefined): Store {
  let ended = false;
  const use = <T>(call: () => T): T => {
    if (ended) throw new Error('Cannot use a pool after calling end on the pool');
    return call();
  };
  const wrap = (target: object): object =>
    new Proxy(target, {
      get(on, name) {
        const value: unknown = Reflect.get(on, name);
        if (typeof value !== 'function') return value;
        const method = value as (...args: unknown[]) => unknown;
        return (...args: unknown[]) => use(() => method.apply(on, args));
      },
    });
  const expectations = wrap(data.expectations);
  const lifecycle = wrap(data.lifecycle);
  const store = wrap(data);
  return new Proxy(store, {
    get(on, name) {
      if (name === 'expectations') return expectations;
      if (name === 'lifecycle') return lifecycle;
      if (name === 'close') return () => void (ended = true);
      if (name === 'claim')
        return (key: string, ttlMs: number, token?: string) =>
          use(() => {
            const now = () => data.claim(key, ttlMs, token);
            return claim(key, now) ?? now();
          });
      return Reflect.get(on, name);
    },
  }) as Store;
}

/**
 * `pooled(data)`, whose first claim of a key of `id` is written and answers once `open()` is called (a query
 * in flight); `claiming` once that claim began.
 */
export function firstClaimHeld(data: MemoryStore, id: string) {
  const { gate, open } = latch();
  const held = { claiming: false, open, store: undefined as unknown as Store };
  held.store = pooled(data, (key, claim) => {
    if (!key.startsWith(id) || held.claiming) return undefined;
    held.claiming = true;
    const claimed = claim();
    return gate.then(() => claimed);
  });
  return held;
}

/**
 * Closes the server `t` serves now, then starts `ipn.close()` and calls `open` 50 ms later (the work held
 * until then answers while close() runs); resolves once close() did.
 */
export async function closeWhileOpening(
  t: Session,
  ipn: { close(options: { timeoutMs: number }): Promise<void> },
  open: () => void,
): Promise<void> {
  await t.running?.close();
  t.running = undefined;
  const closed = ipn.close({ timeoutMs: 5_000 });
  setTimeout(open, 50);
  await closed;
  t.ipn = undefined;
}

/** Closes the server and the router `t` serves now (before their store's connection is ended). */
export async function closeServed(t: Session): Promise<void> {
  await t.running?.close();
  t.running = undefined;
  await t.ipn?.close();
  t.ipn = undefined;
}

/** A real store over a connection of its own, which the host ends (`end`) once `ipn.close()` resolved. */
export interface Connected {
  store: Store;
  end: () => Promise<void>;
}

/**
 * For a describe block: opens a PostgresStore over a pg Pool of its own, in table `ipn_test_<tag>_<pid>_<space>`
 * (migrated the first time); the tables are dropped after the block.
 */
export function postgresConnections(tag: string): (space: string) => Promise<Connected> {
  const tables = new Set<string>();
  const pool = () => new Pool({ connectionString: databaseUrl(), max: 4 });
  afterAll(async () => {
    const cleanup = pool();
    await dropPostgresInboxes(cleanup, [...tables]);
    await cleanup.end();
  }, CLEANUP_TIMEOUT_MS);
  return async (space) => {
    const table = `ipn_test_${tag}_${process.pid}_${space}`;
    const made = pool();
    const store = new PostgresStore({ pool: made, table });
    if (!tables.has(table)) await store.migrate();
    tables.add(table);
    return { store, end: () => made.end() };
  };
}

/**
 * For a describe block: opens a RedisStore over an ioredis client of its own, under the prefix
 * `ipn-test-<tag>-<pid>-<random>-<space>:`; its keys are deleted after the block.
 */
export function redisConnections(tag: string): (space: string) => Promise<Connected> {
  const prefix = `ipn-test-${tag}-${process.pid}-${randomUUID().slice(0, 6)}`;
  afterAll(async () => {
    const cleanup = new Redis(redisUrl());
    const keys = await cleanup.keys(`${prefix}*`);
    if (keys.length > 0) await cleanup.del(...keys);
    await cleanup.quit();
  }, CLEANUP_TIMEOUT_MS);
  return async (space) => {
    const client = new Redis(redisUrl(), { lazyConnect: true });
    client.on('error', () => {});
    await client.connect();
    const store = new RedisStore({ client, prefix: `${prefix}-${space}:` });
    return { store, end: async () => void (await client.quit()) };
  };
}
