import { Pool as PgPool } from 'pg';
import { MysqlStore } from '../../../lib/mysql.js';
import { PostgresStore } from '../../../lib/postgres.js';
import { BatchStall, STALLED_BATCH_MS } from '../../../lib/stores/batcher.js';

/**
 * A batch stuck on its connection (a network partition: the query never answers) gives up its place after
 * the router's storeTimeoutMs, so that the lifecycle decisions behind it are sent: on every store that
 * batches them. No database: each connection's first query hangs for good, and the test counts the batches
 * that reached a connection.
 */
const hanging = (): Promise<never> => new Promise(() => {});

describe('BatchStall', () => {
  test('starts at STALLED_BATCH_MS and takes the shortest positive storeTimeoutMs', () => {
    const stall = new BatchStall();
    expect(stall.ms()).toBe(STALLED_BATCH_MS);
    stall.use(800);
    stall.use(2_000);
    stall.use(0);
    stall.use(-1);
    stall.use(Number.NaN);
    stall.use(Infinity);
    expect(stall.ms()).toBe(800);
  });
});

/**
 * With storeTimeoutMs 200, a decision queued behind a stuck one is sent once the stuck batch gives up its
 * place (after 200 ms, long before the default 5 s). `sent()`: how many batches reached a connection.
 */
async function expectStallEscape(store: MysqlStore | PostgresStore, sent: () => number): Promise<void> {
  store.useStoreTimeout(200);
  void store.lifecycle.decide('A', 'SUCCESSFUL', 60_000).catch(() => {});
  await jest.advanceTimersByTimeAsync(1);
  expect(sent()).toBe(1);
  void store.lifecycle.decide('B', 'SUCCESSFUL', 60_000).catch(() => {});
  await jest.advanceTimersByTimeAsync(100);
  expect(sent()).toBe(1); // queued behind the stuck batch
  await jest.advanceTimersByTimeAsync(150);
  expect(sent()).toBe(2); // sent once the stuck one gave up its place
}

describe("a stuck lifecycle batch gives up its place after the router's storeTimeoutMs", () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  test('MysqlStore', async () => {
    let connections = 0;
    const connection = {
      query: hanging,
      execute: hanging,
      beginTransaction: hanging,
      commit: hanging,
      rollback: hanging,
      release: () => {},
    };
    const pool = {
      query: hanging,
      getConnection: () => {
        connections += 1;
        return Promise.resolve(connection);
      },
    };
    await expectStallEscape(new MysqlStore({ pool: pool as never, table: 'ipn_stall' }), () => connections);
  });

  test('PostgresStore', async () => {
    let sent = 0;
    const pool = Object.assign(Object.create(PgPool.prototype) as PgPool, {
      query: () => {
        sent += 1;
        return hanging();
      },
    });
    await expectStallEscape(new PostgresStore({ pool, table: 'ipn_stall' }), () => sent);
  });
});
