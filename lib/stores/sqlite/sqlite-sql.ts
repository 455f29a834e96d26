import { olderClaim } from '../schema-migrations.js';
/** A table name: an identifier SQLite takes quoted as it is, short enough for its derived names. */
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

/**
 * Checks `table` (letters, digits and underscores, not starting with a digit) and quotes it.
 * @throws TypeError when `table` is not such a name.
 */
export function quoteTable(table: unknown, owner = 'SqliteStore'): string {
  if (typeof table !== 'string' || !IDENTIFIER.test(table)) {
    throw new TypeError(
      `${owner}: table must be a name such as 'ipn_inbox' (letters, digits and underscores, at most 63, ` +
        `not starting with a digit), got ${JSON.stringify(table) ?? String(table)}`,
    );
  }
  return `"${table}"`;
}

/**
 * The SQL that creates the audit table beside the inbox `table` (`<table>_audit`: one row per operator
 * action, its time in milliseconds since the epoch); `SqliteStore.migrate()` runs it too, apart from the
 * inbox's schema. Idempotent.
 */
export function sqliteAuditSql(table = 'ipn_inbox'): string {
  return `CREATE TABLE IF NOT EXISTS ${sqliteAuditTable(table)} (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  at_ms INTEGER NOT NULL,
  action TEXT NOT NULL,
  actor TEXT NOT NULL,
  detail TEXT NOT NULL
);
`;
}

/** The quoted audit table beside inbox `table`: `<table>_audit`. */
export function sqliteAuditTable(table: string): string {
  quoteTable(table, 'sqliteAuditSql');
  return `"${table}_audit"`;
}

/** The columns an `InboxEntry` is read from. */
const COLUMNS =
  'key, transaction_id, state, record, status, attempts, last_error, received_at, updated_at, next_attempt_at, delivered_at, lease_until';

/** Lease columns cleared when an attempt ends (`?`: now). */
const END_LEASE = 'lease_id = NULL, lease_until = NULL, updated_at = ?';

/** A row's record is `{}`: with {@link olderClaim}, an older ipn-kit's claim, which version 7 leaves in the inbox. */
const EMPTY_RECORD = "record = '{}'";

/** Not an older ipn-kit's claim: every read, count and replay of entries has it (see {@link olderClaim}). */
const ENTRY = `NOT ${olderClaim(EMPTY_RECORD)}`;

/**
 * Every statement the store runs on `table`, with `?` for every value (in the order the store passes them;
 * a value used twice is passed twice). Each is one statement: SQLite runs it atomically, holding the
 * file's write lock from its start, so two processes never interleave inside one.
 */
export function sqliteInboxSql(table: string) {
  const t = quoteTable(table);
  const claims = `"${table}_claims"`;
  return {
    // A claim is a row of <table>_claims (schema version 7), never of the inbox: it is taken only while the
    // inbox has no row of the key (a receive of it came first: a resend; or an older ipn-kit's claim, left
    // there by version 7: see olderClaim), and the key's claim, if any, has
    // expired: then it is taken over, in the same statement (one writer at a time). Its token is kept, so
    // that the same claim asked again is recognised (see Store.claim). Values: key, token, now, expiry, key.
    claim: `INSERT INTO ${claims} AS c (key, token, claimed_at, expires_at)
      SELECT ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM ${t} WHERE key = ?)
      ON CONFLICT (key) DO UPDATE
        SET token = excluded.token, claimed_at = excluded.claimed_at, expires_at = excluded.expires_at
        WHERE c.expires_at <= excluded.claimed_at`,
    // Values: key, token, now.
    claimedBy: `SELECT 1 AS claimed FROM ${claims} WHERE key = ? AND token = ? AND expires_at > ?`,
    release: `DELETE FROM ${t} WHERE key = ? AND (? IS NULL OR lease_id = ?)`,
    releaseClaim: `DELETE FROM ${claims} WHERE key = ?`,
    // Not while the key is claimed: a claim and a receive of one key exclude each other (one index lookup).
    // An expired claim no longer holds the key (as in RedisStore and MemoryStore). Values as the columns,
    // then the key and now again.
    receive: `INSERT INTO ${t} (key, transaction_id, state, record, status, attempts, received_at, updated_at,
        next_attempt_at, lease_id, lease_until)
      SELECT ?, ?, ?, ?, 'received', 1, ?, ?, ?, ?, ?
      WHERE NOT EXISTS (SELECT 1 FROM ${claims} WHERE key = ? AND expires_at > ?) ON CONFLICT (key) DO NOTHING`,
    // One statement: the row goes from the contradicted copy to the service's record, never through absent.
    replace: `UPDATE ${t} SET record = ?, status = 'received', attempts = 1, last_error = NULL,
        next_attempt_at = ?, lease_id = ?, lease_until = ?, updated_at = ?
      WHERE key = ? AND lease_id = ?`,
    // One statement, so one writer at a time: two processes leasing at once get disjoint entries.
    lease: `UPDATE ${t} SET lease_id = ?, lease_until = ?, attempts = attempts + 1, updated_at = ?
      WHERE key IN (
        SELECT key FROM ${t}
        WHERE status IN ('received', 'failed') AND next_attempt_at <= ?
          AND (lease_until IS NULL OR lease_until < ?)
        ORDER BY received_at, key LIMIT ?
      )
      RETURNING ${COLUMNS}`,
    delivered: `UPDATE ${t} SET status = 'delivered', delivered_at = ?, ${END_LEASE}
      WHERE key = ? AND lease_id = ?`,
    failed: `UPDATE ${t} SET status = 'failed', last_error = ?, next_attempt_at = ?, ${END_LEASE}
      WHERE key = ? AND lease_id = ?`,
    dead: `UPDATE ${t} SET status = 'dead', last_error = ?, ${END_LEASE} WHERE key = ? AND lease_id = ?`,
    // Each filter is off when its value is null. lower() folds ASCII letters only (SQLite's own).
    list: (newest: boolean) => `SELECT ${COLUMNS} FROM ${t}
      WHERE (? IS NULL OR status = ?)
        AND (? IS NULL OR transaction_id = ?)
        AND (? IS NULL OR instr(lower(coalesce(json_extract(record, '$.custom_data'), '')), lower(?)) > 0)
        AND (? IS NULL OR received_at >= ?)
        AND (? IS NULL OR received_at < ?)
        AND ${ENTRY}
      ORDER BY ${newest ? 'received_at DESC, key DESC' : 'received_at, key'} LIMIT ? OFFSET ?`,
    countByStatus: `SELECT status, count(*) AS count FROM ${t}
      WHERE (? IS NULL OR received_at >= ?) AND ${ENTRY} GROUP BY status`,
    get: `SELECT ${COLUMNS} FROM ${t} WHERE key = ? AND ${ENTRY}`,
    // A replay keeps a live lease, and passes over an older ipn-kit's claim, which holds no notification.
    replay: `UPDATE ${t} SET status = 'received', attempts = 0, next_attempt_at = ?, updated_at = ?
      WHERE key = ? AND (? IS NULL OR instr(',' || ? || ',', ',' || status || ',') > 0) AND ${ENTRY}`,
    // The service's record in place of a kept copy's, made due in the same write: never under a live lease.
    replayWith: `UPDATE ${t} SET record = ?, status = 'received', attempts = 0, next_attempt_at = ?,
        updated_at = ?
      WHERE key = ? AND instr(',' || ? || ',', ',' || status || ',') > 0
        AND (lease_until IS NULL OR lease_until < ?) AND ${ENTRY}`,
    purge: `DELETE FROM ${t} WHERE status = 'delivered' AND delivered_at < ?`,
    // Only those no longer holding their key, by this machine's clock in ms (as Date.now(), which stamped them).
    purgeClaims: `DELETE FROM ${claims} WHERE claimed_at < ?
      AND expires_at <= CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)`,
    purgeLiveClaims: `DELETE FROM ${claims} WHERE claimed_at < ?`,
    purgeDead: `DELETE FROM ${t} WHERE status = 'dead' AND updated_at < ?`,
    // redact(): the records to blank (in JavaScript, one rule for every store), then each set only if unchanged
    // and still delivered or dead: a replay between the two (the entry received again) keeps its record whole.
    redactable: `SELECT key, record FROM ${t} WHERE status IN ('delivered', 'dead') AND received_at < ?`,
    setRecord: `UPDATE ${t} SET record = ? WHERE key = ? AND record = ? AND status IN ('delivered', 'dead')`,
  };
}

/** The statements of {@link sqliteInboxSql}. */
export type SqliteInboxSql = ReturnType<typeof sqliteInboxSql>;
