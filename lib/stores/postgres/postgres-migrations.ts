/**
 * The `migrate()` calls in flight, by pool and table, and how many have started. A store's query that finds
 * its table missing (`42P01`) while a `migrate()` of that table runs on its pool, whichever `PostgresStore`
 * started it, waits for it and runs again: the router's first recovery pass runs as soon as the router is
 * made, and the documented start (`ipnRouter({ store })`, then `await store.migrate()` before `listen`) must
 * not see it fail on a table that is still being created. A query never waits before it is sent: a
 * `migrate()` held up (behind another instance's, whose `CREATE INDEX IF NOT EXISTS` waits for the writes of
 * the moment; on a connection the network dropped) holds up nothing on a table that exists. Keyed weakly: a
 * pool that is dropped takes its entries with it.
 */
interface Migrations {
  /** Settles once every `migrate()` of the table started so far has. */
  running: Promise<void> | undefined;
  /** How many `migrate()` calls of the table have started, to tell one that came and went during a query. */
  started: number;
}

const tracked = new WeakMap<object, Map<string, Migrations>>();

function migrationsOf(pool: object, table: string): Migrations {
  const tables = tracked.get(pool) ?? new Map<string, Migrations>();
  tracked.set(pool, tables);
  const found = tables.get(table);
  if (found !== undefined) return found;
  const created: Migrations = { running: undefined, started: 0 };
  tables.set(table, created);
  return created;
}

/** Runs `migrate`, recorded for `pool` and `table` until it settles; resolves or rejects as it does. */
export function trackMigration(pool: object, table: string, migrate: () => Promise<void>): Promise<void> {
  const migrations = migrationsOf(pool, table);
  migrations.started += 1;
  const running = Promise.resolve().then(migrate);
  const settled = running.then(
    () => undefined,
    () => undefined,
  );
  // Two at once (the advisory lock makes them take turns in the database): a query waits for both.
  const previous = migrations.running;
  const turn = previous === undefined ? settled : previous.then(() => settled);
  migrations.running = turn;
  void turn.then(() => {
    if (migrations.running === turn) migrations.running = undefined;
  });
  return running;
}

/** Where the `migrate()` calls of `table` on `pool` stand when a query is sent: see {@link afterMigration}. */
export interface MigrationMark {
  readonly running: Promise<void> | undefined;
  readonly started: number;
}

/** Marks where the `migrate()` calls of `table` on `pool` stand, as a query is sent. */
function markMigration(pool: object, table: string): MigrationMark {
  const { running, started } = tracked.get(pool)?.get(table) ?? { running: undefined, started: 0 };
  return { running, started };
}

/**
 * For a query, sent at `mark`, that found its table missing: settles (whether the migrations succeeded or
 * not) once every `migrate()` of `table` on `pool` in flight then or started since has, when there was one,
 * so that the query is run again; `undefined` when there was none, and the table is simply missing.
 */
function afterMigration(pool: object, table: string, mark: MigrationMark): Promise<void> | undefined {
  const now = markMigration(pool, table);
  if (now.running !== undefined) return now.running;
  if (mark.running !== undefined || now.started !== mark.started) return Promise.resolve();
  return undefined;
}

/**
 * Runs `attempt` (a statement of the store of `table` on `pool`, PostgreSQL's or MySQL's). One that finds
 * its table `missing` while a `migrate()` of it runs on the pool runs again once that has settled: it never
 * waits for a `migrate()` before it is sent, so one held up holds up nothing on a table that exists. A
 * failure is thrown as `failure` makes it (the store's `StoreError`).
 */
export async function retriedAfterMigration<R>(
  pool: object,
  table: string,
  attempt: () => Promise<R>,
  missing: (error: unknown) => boolean,
  failure: (error: unknown) => Error,
): Promise<R> {
  const mark = markMigration(pool, table);
  try {
    return await attempt();
  } catch (error) {
    const migrating = missing(error) ? afterMigration(pool, table, mark) : undefined;
    if (migrating === undefined) throw failure(error);
    await migrating;
  }
  try {
    return await attempt();
  } catch (error) {
    throw failure(error);
  }
}
