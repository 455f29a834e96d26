/**
 * The `migrate()` calls in flight, by pool and table. A store's queries wait for the one on their table,
 * whichever `PostgresStore` started it: the router's first recovery pass runs as soon as the router is made,
 * and the documented start (`ipnRouter({ store })`, then `await store.migrate()` before `listen`) must not
 * see it fail on a table that is still being created. Keyed weakly: a pool that is dropped takes its
 * entries with it.
 */
const inFlight = new WeakMap<object, Map<string, Promise<void>>>();

/** Runs `migrate`, recorded for `pool` and `table` until it settles; resolves or rejects as it does. */
export function trackMigration(pool: object, table: string, migrate: () => Promise<void>): Promise<void> {
  const tables = inFlight.get(pool) ?? new Map<string, Promise<void>>();
  inFlight.set(pool, tables);
  const running = Promise.resolve().then(migrate);
  const settled = running.then(
    () => undefined,
    () => undefined,
  );
  // Two at once (the advisory lock makes them take turns in the database): the queries wait for both.
  const previous = tables.get(table);
  const turn = previous === undefined ? settled : previous.then(() => settled);
  tables.set(table, turn);
  void turn.then(() => {
    if (tables.get(table) === turn) tables.delete(table);
  });
  return running;
}

/**
 * Settles once no `migrate()` of `table` on `pool` is in flight (whether it succeeded or not: a query after
 * a failed one fails on its own, saying what is missing). `undefined` when none is, so that a query does
 * not wait a tick for nothing.
 */
export function migrationOf(pool: object, table: string): Promise<void> | undefined {
  return inFlight.get(pool)?.get(table);
}
