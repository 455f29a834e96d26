/** What is guarded already: each pool once, each client once. */
const guarded = new WeakSet<object>();

/** Keeps an `error` a checked-out client emits from reaching the process; the pool re-lists it idle. */
const ignore = (): void => {};

/**
 * Makes every client `pool` hands out (a `pg` `Pool`, through its `acquire` event) carry an `error`
 * listener for as long as it lives, so that a server ending the connection while it is checked out (the
 * delivery's transaction of an ORM that has no listener of its own: Drizzle, Kysely) never becomes an
 * `Unhandled 'error' event` that stops the process. Nothing is lost: pg rejects the query under way, or
 * refuses the next one, so the attempt fails and is retried, and the pool drops the broken client when it
 * comes back. A pool's idle clients keep pg's own listener (the pool's `error` event). Does nothing for
 * what is not an event emitter with `connect` (a single `Client`, a custom pool).
 */
export function guardCheckouts(pool: unknown): void {
  if (typeof pool !== 'object' || pool === null || guarded.has(pool)) return;
  const on: unknown = Reflect.get(pool, 'on');
  if (typeof on !== 'function' || typeof Reflect.get(pool, 'connect') !== 'function') return;
  if (Reflect.get(pool, 'connection') !== undefined) return; // a connected Client: it emits no `acquire`
  guarded.add(pool);
  (on as (event: string, listener: (client: unknown) => void) => void).call(pool, 'acquire', (client) => {
    if (typeof client !== 'object' || client === null || guarded.has(client)) return;
    const listen: unknown = Reflect.get(client, 'on');
    if (typeof listen !== 'function') return;
    guarded.add(client);
    (listen as (event: string, listener: () => void) => void).call(client, 'error', ignore);
  });
}
