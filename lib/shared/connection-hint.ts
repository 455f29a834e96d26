/** The fix of a database timeout shorter than the listener, named after the setting. */
const raise = (setting: string): string =>
  `raise ${setting} for the database role (ALTER ROLE ... SET ${setting} = ...) above leaseMs, or keep the ` +
  'listener under it (work outside the database after the delivery, not inside it)';

/** What the server or a pooler says when it ends a delivery's connection, and what to do about it. */
const HINTS: Array<[RegExp, string]> = [
  [
    /idle transaction timeout|query_timeout|query timeout/i,
    "raise the pooler's idle_transaction_timeout or query_timeout above leaseMs",
  ],
  [
    /idle-in-transaction timeout|idle_in_transaction_session_timeout/i,
    raise('idle_in_transaction_session_timeout'),
  ],
  [/statement timeout|statement_timeout/i, raise('statement_timeout')],
  [/transaction timeout|transaction_timeout/i, raise('transaction_timeout')],
  [
    /Connection terminated|not queryable|terminating connection|server closed the connection|ECONNRESET/i,
    'the connection was ended while the listener worked (a restart, a failover, pg_terminate_backend, a ' +
      "pooler's disconnect, or a role's idle_in_transaction_session_timeout or statement_timeout shorter " +
      'than the listener: raise it for the role above leaseMs, or keep the listener under it)',
  ],
];

/**
 * Words on what to do when `error` (or one of its causes) says the database or a pooler ended the
 * connection of a delivery, naming the timeout when it was one (hosted PostgreSQL sets
 * `idle_in_transaction_session_timeout` and `statement_timeout` for its roles); `undefined` otherwise.
 * Read from the messages, as pg keeps the SQLSTATE only on the first error of a connection.
 */
export function connectionHint(error: unknown): string | undefined {
  const seen = new Set<unknown>();
  for (let at = error; at instanceof Error && !seen.has(at); at = at.cause) {
    seen.add(at);
    const found = HINTS.find(([pattern]) => pattern.test(at.message));
    if (found) return found[1];
  }
  return undefined;
}
