import { UTF8_TEXT } from './mysql-rows.js';
import { distinctName, olderClaim, tableParts } from '../schema-migrations.js';

/** The expectations table's suffix: the inbox name is shortened so that the whole stays within 64. */
const EXPECTED_SUFFIX = '_expected';

/** A table name checked and quoted for SQL, with the expectations table's name beside it. */
export interface MysqlTableNames {
  /** As given: `ipn_inbox` or `database.ipn_inbox`. */
  name: string;
  /** Quoted for SQL: `` `ipn_inbox` `` or `` `database`.`ipn_inbox` ``. */
  quoted: string;
  /** The quoted name of the expectations table, `<table>_expected`, in the same database. */
  expected: string;
}

/**
 * Checks `table` (`name` or `database.name`, each of letters, digits and underscores, not starting with a
 * digit) and quotes it with backticks.
 * @throws TypeError when `table` is not such a name.
 */
export function mysqlTableNames(table: unknown, owner = 'MysqlStore'): MysqlTableNames {
  const parts = tableParts(owner, table, 64); // MySQL's 64 characters
  const quote = (part: string): string => `\`${part}\``;
  const name = parts[parts.length - 1]!;
  const expected = `${name.slice(0, 64 - EXPECTED_SUFFIX.length)}${EXPECTED_SUFFIX}`;
  return {
    name: table as string,
    quoted: parts.map(quote).join('.'),
    expected: [...parts.slice(0, -1), expected].map(quote).join('.'),
  };
}

/**
 * The SQL that creates the inbox table, for teams that run their own migrations (the same statement
 * `MysqlStore.migrate()` runs). Idempotent: `IF NOT EXISTS`. One statement, so that it runs through a pool
 * without `multipleStatements`.
 *
 * - The key `transaction_id:state` is the primary key, in a binary collation: MySQL's default collations
 *   ignore case, and `tx1:successful` must not be a resend of `TX1:SUCCESSFUL`.
 * - The record is the notification's JSON text in a `LONGTEXT`, all ASCII: every character outside ASCII
 *   is escaped (`\u00e9`; a NUL, a lone surrogate, an emoji's halves too), so every record round-trips
 *   exactly, whatever the charset of the connections that write and read it. (A `JSON` column would
 *   re-encode it: MariaDB's is a `LONGTEXT` anyway, and MySQL's refuses a lone surrogate.) `custom_data` is
 *   kept beside it as text (utf8mb4), for the operator's search: the store sends it as the hex of its
 *   UTF-8, so that it too is exact whatever the connection's charset.
 * - Times are `DATETIME(3)` in UTC, written with `UTC_TIMESTAMP(3)` (never `NOW()`, which follows the
 *   session's time zone) and read as milliseconds since the epoch, so that no time zone setting of the
 *   server, the session or the driver moves them.
 *
 * @param table `name` or `database.name`. @default 'ipn_inbox'
 * @throws TypeError when `table` is not such a name.
 * @example
 * // Schema version 1's inbox alone: in a migration of your own, run every version of mysqlMigrations().
 * import { mysqlSchemaSql } from 'ipn-kit/mysql';
 * await pool.query(mysqlSchemaSql('ipn_inbox'));
 */
export function mysqlSchemaSql(table = 'ipn_inbox'): string {
  const { quoted } = mysqlTableNames(table, 'mysqlSchemaSql');
  return `CREATE TABLE IF NOT EXISTS ${quoted} (
  \`key\` VARCHAR(255) NOT NULL,
  transaction_id VARCHAR(255) NOT NULL,
  state VARCHAR(32) NOT NULL,
  record LONGTEXT NOT NULL,
  custom_data LONGTEXT NULL,
  status VARCHAR(16) NOT NULL,
  attempts INT NOT NULL DEFAULT 0,
  last_error MEDIUMTEXT NULL,
  received_at DATETIME(3) NOT NULL,
  updated_at DATETIME(3) NOT NULL,
  next_attempt_at DATETIME(3) NOT NULL,
  delivered_at DATETIME(3) NULL,
  lease_id VARCHAR(255) NULL,
  lease_until DATETIME(3) NULL,
  PRIMARY KEY (\`key\`),
  KEY ipn_kit_due (status, received_at),
  CHECK (status IN ('received', 'delivered', 'failed', 'dead')),
  CHECK (\`key\` = CONCAT(transaction_id, ':', state))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin`;
}

/**
 * The SQL that creates the expectations table beside the inbox `table` (`<table>_expected`), for teams
 * that run their own migrations; `MysqlStore.migrate()` runs it too. Idempotent. Times are the app's clock
 * in milliseconds since the epoch.
 * @example
 * import { mysqlExpectationsSql } from 'ipn-kit/mysql';
 * await pool.query(mysqlExpectationsSql('ipn_inbox'));
 */
export function mysqlExpectationsSql(table = 'ipn_inbox'): string {
  const { expected } = mysqlTableNames(table, 'mysqlExpectationsSql');
  return `CREATE TABLE IF NOT EXISTS ${expected} (
  transaction_id VARCHAR(255) NOT NULL,
  custom_data LONGTEXT NULL,
  amount DOUBLE NULL,
  expected_at BIGINT NOT NULL,
  due_at BIGINT NOT NULL,
  attempts INT NOT NULL DEFAULT 0,
  PRIMARY KEY (transaction_id),
  KEY ipn_kit_due (due_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin`;
}

/** The database's now, in UTC whatever the session's time zone. */
export const NOW = 'UTC_TIMESTAMP(3)';

/** The epoch as a `DATETIME`: times go in and out as milliseconds from it, never through a time zone. */
const EPOCH = "TIMESTAMP'1970-01-01 00:00:00'";

/** The `DATETIME` of `ms` milliseconds since the epoch, bound as `?`. */
export const AT = `(${EPOCH} + INTERVAL (? * 1000) MICROSECOND)`;

/** `?` milliseconds after the database's now. */
const FROM_NOW = `(${NOW} + INTERVAL (? * 1000) MICROSECOND)`;

/** A `DATETIME` column (or expression) as milliseconds since the epoch. */
export const msOf = (column: string): string => `(TIMESTAMPDIFF(MICROSECOND, ${EPOCH}, ${column}) DIV 1000)`;

/** The columns an `InboxEntry` is read from, times as milliseconds since the epoch. */
const COLUMNS = [
  '`key`',
  'transaction_id',
  'state',
  'record',
  'status',
  'attempts',
  // As hex of its utf8mb4 bytes: read through a pool of another charset, the text itself would be converted
  // to it (an emoji to `?` through latin1). toEntry decodes it.
  'HEX(last_error) AS last_error',
  ...['received_at', 'updated_at', 'next_attempt_at', 'delivered_at', 'lease_until'].map(
    (column) => `${msOf(column)} AS ${column}`,
  ),
].join(', ');

/** The columns a receive writes, and one row of its values (key, transaction id, state, record, custom_data, lease id, ms). */
const RECEIVED_COLUMNS = `\`key\`, transaction_id, state, record, custom_data, status, attempts, received_at,
  updated_at, next_attempt_at, lease_id, lease_until`;
/** A receive's values as a row of a derived table (`u`), its columns named for the first row only. */
const RECEIVED_VALUES = (first: boolean): string =>
  first
    ? `SELECT ? AS k, ? AS tid, ? AS st, ? AS rec, ${UTF8_TEXT} AS cd, ? AS lid, ? AS ms`
    : `SELECT ?, ?, ?, ?, ${UTF8_TEXT}, ?, ?`;
/** The row a receive inserts, from the derived table `u`. */
const RECEIVED_ROW = `u.k, u.tid, u.st, u.rec, u.cd, 'received', 1, ${NOW}, ${NOW}, ${NOW}, u.lid,
  (${NOW} + INTERVAL (u.ms * 1000) MICROSECOND)`;

/** Lease columns cleared when an attempt ends. */
const END_LEASE = `lease_id = NULL, lease_until = NULL, updated_at = ${NOW}`;

/** A row's record is `{}`: with {@link olderClaim}, an older ipn-kit's claim, which version 7 leaves in the inbox. */
export const EMPTY_RECORD = "record = '{}'";

/** Not an older ipn-kit's claim: every read, count and replay of entries has it (see {@link olderClaim}). */
const ENTRY = `NOT ${olderClaim(EMPTY_RECORD)}`;

/**
 * Every statement the store runs on `table`, with `?` for every value. Each compares times with the
 * database's `UTC_TIMESTAMP(3)`, so that instances whose clocks disagree still agree on what is due and
 * leased. A `count` statement's count is `affectedRows`, which mysql2 gives as the rows matched (its
 * default `FOUND_ROWS` flag).
 */
export function mysqlInboxSql(table: string) {
  const t = mysqlTableNames(table).quoted;
  const claims = mysqlClaimsTable(table);
  /**
   * Not while the key is claimed: a claim and a receive of one key exclude each other (one index lookup). An
   * expired claim no longer holds the key (as in RedisStore and MemoryStore).
   */
  const unclaimed = `NOT EXISTS (SELECT 1 FROM ${claims} AS c WHERE c.\`key\` = u.k AND c.expires_at > ${NOW})`;
  return {
    // A claim is a row of <table>_claims (schema version 7), never of the inbox: it is taken only while the
    // inbox has no row of the key (a receive of it came first: a resend; or an older ipn-kit's claim, left
    // there by version 7: see olderClaim), and the key's claim, if any, has
    // expired: then the update takes it over (each column set only then; expires_at last, as MySQL sets them
    // in order and a later one reads the earlier ones' new values). Two at once after the expiry: the second
    // waits for the first's row lock, then finds the row live and changes nothing. Its token is kept, so that
    // the same claim asked again (its answer was lost) is recognised as this caller's own (claimedBy). Not
    // INSERT IGNORE, which would also turn a value the table refuses into a warning and a truncated row.
    // Values: key, token, ttl ms, key, token, ttl ms, ttl ms.
    claim: `INSERT INTO ${claims} (\`key\`, token, claimed_at, expires_at)
      SELECT ?, ?, ${NOW}, ${FROM_NOW} FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM ${t} WHERE \`key\` = ?)
      ON DUPLICATE KEY UPDATE
        token = IF(${claims}.expires_at <= ${NOW}, ?, ${claims}.token),
        claimed_at = IF(${claims}.expires_at <= ${NOW}, ${NOW}, ${claims}.claimed_at),
        expires_at = IF(${claims}.expires_at <= ${NOW}, ${FROM_NOW}, ${claims}.expires_at)`,
    // Values: key, token, key.
    claimedBy: `SELECT 1 AS claimed FROM ${claims} AS c
      WHERE c.\`key\` = ? AND c.token = ? AND NOT EXISTS (SELECT 1 FROM ${t} WHERE \`key\` = ?)`,
    release: `DELETE FROM ${t} WHERE \`key\` = ? AND (? IS NULL OR lease_id = ?)`,
    releaseClaim: `DELETE FROM ${claims} WHERE \`key\` = ?`,
    // One receive, its values as receiveMany's row.
    receive: `INSERT INTO ${t} (${RECEIVED_COLUMNS})
      SELECT ${RECEIVED_ROW} FROM (${RECEIVED_VALUES(true)}) AS u WHERE ${unclaimed}`,
    // Group commit: many receives in one statement, in key order (the store sorts them), so that two
    // instances inserting overlapping batches (a burst resent to both) take the keys' locks in the same
    // order. A key already there is left as it is (the update sets nothing), where a plain INSERT would fail
    // the whole batch; which rows this batch inserted is read next (`receivedBy`).
    receiveMany: (count: number) => `INSERT INTO ${t} (${RECEIVED_COLUMNS})
      SELECT ${RECEIVED_ROW} FROM (
        ${Array.from({ length: count }, (_, index) => RECEIVED_VALUES(index === 0)).join('\n        UNION ALL ')}
      ) AS u WHERE ${unclaimed} ORDER BY u.k
      ON DUPLICATE KEY UPDATE \`key\` = ${t}.\`key\``,
    // Each receive has a lease id of its own: a row holding it is the one that receive inserted.
    receivedBy: `SELECT \`key\`, lease_id FROM ${t} WHERE \`key\` IN (?)`,
    // One statement: the row goes from the contradicted copy to the service's record, never through absent.
    replace: `UPDATE ${t} SET record = ?, custom_data = ${UTF8_TEXT}, status = 'received', attempts = 1,
        last_error = NULL, next_attempt_at = ${NOW}, lease_id = ?, lease_until = ${FROM_NOW},
        updated_at = ${NOW}
      WHERE \`key\` = ? AND lease_id = ?`,
    // SKIP LOCKED: a concurrent lease passes over the rows another one is taking instead of waiting for
    // them. One status at a time, read in the order of the index (status, received_at, key): InnoDB locks
    // every row it reads before a sort, so a sorted read would lock every due row and leave none to the
    // other instances; read in order, it stops at the limit. MySQL has no UPDATE ... RETURNING: the rows
    // are locked here, then updated and read by key in the same transaction. The limit is a checked whole
    // number, written in.
    due: (status: 'received' | 'failed', limit: number) => `SELECT \`key\` FROM ${t} FORCE INDEX (ipn_kit_due)
      WHERE status = '${status}' AND next_attempt_at <= ${NOW}
        AND (lease_until IS NULL OR lease_until < ${NOW})
      ORDER BY received_at, \`key\` LIMIT ${limit} FOR UPDATE SKIP LOCKED`,
    // Whether anything is due, without a lock or a transaction: most lease passes find nothing, and end here.
    anyDue: `SELECT 1 AS due FROM ${t}
      WHERE status IN ('received', 'failed') AND next_attempt_at <= ${NOW}
        AND (lease_until IS NULL OR lease_until < ${NOW})
      LIMIT 1`,
    take: `UPDATE ${t} SET lease_id = ?, lease_until = ${FROM_NOW}, attempts = attempts + 1,
        updated_at = ${NOW}
      WHERE \`key\` IN (?)`,
    taken: `SELECT ${COLUMNS} FROM ${t} WHERE \`key\` IN (?) AND lease_id = ? ORDER BY received_at, \`key\``,
    delivered: `UPDATE ${t} SET status = 'delivered', delivered_at = ${NOW}, ${END_LEASE}
      WHERE \`key\` = ? AND lease_id = ?`,
    failed: `UPDATE ${t} SET status = 'failed', last_error = ${UTF8_TEXT}, next_attempt_at = ${AT}, ${END_LEASE}
      WHERE \`key\` = ? AND lease_id = ?`,
    dead: `UPDATE ${t} SET status = 'dead', last_error = ${UTF8_TEXT}, ${END_LEASE} WHERE \`key\` = ? AND lease_id = ?`,
    // Each filter is off when its parameter is null (each is bound twice). LOCATE, not LIKE: a % or _ in
    // the text is looked for as it is. The text comes as hex (see asUtf8Hex), in the column's collation.
    list: (newest: boolean, limit: number, offset: number) => `SELECT ${COLUMNS} FROM ${t}
      WHERE (? IS NULL OR status = ?)
        AND (? IS NULL OR transaction_id = ?)
        AND (? IS NULL OR LOCATE(LOWER(${UTF8_TEXT} COLLATE utf8mb4_bin), LOWER(custom_data)) > 0)
        AND (? IS NULL OR received_at >= ${AT})
        AND (? IS NULL OR received_at < ${AT})
        AND ${ENTRY}
      ORDER BY ${newest ? 'received_at DESC, `key` DESC' : 'received_at, `key`'}
      LIMIT ${limit} OFFSET ${offset}`,
    countByStatus: `SELECT status, COUNT(*) AS count FROM ${t}
      WHERE (? IS NULL OR received_at >= ${AT}) AND ${ENTRY} GROUP BY status`,
    get: `SELECT ${COLUMNS} FROM ${t} WHERE \`key\` = ? AND ${ENTRY}`,
    // A replay keeps a live lease (an attempt still running finishes first, alone), and passes over an
    // older ipn-kit's claim, which holds no notification to deliver.
    replay: `UPDATE ${t} SET status = 'received', attempts = 0,
        next_attempt_at = ${NOW} + INTERVAL (? * 1000) MICROSECOND, updated_at = ${NOW}
      WHERE \`key\` = ? AND (? IS NULL OR FIND_IN_SET(status, ?) > 0) AND ${ENTRY}`,
    // The service's record in place of a kept copy's, made due in the same write: never under a live lease.
    replayWith: `UPDATE ${t} SET record = ?, custom_data = ${UTF8_TEXT}, status = 'received', attempts = 0,
        next_attempt_at = ${NOW}, updated_at = ${NOW}
      WHERE \`key\` = ? AND FIND_IN_SET(status, ?) > 0 AND (lease_until IS NULL OR lease_until < ${NOW})
        AND ${ENTRY}`,
    purge: `DELETE FROM ${t} WHERE status = 'delivered' AND delivered_at < ${AT}`,
    purgeClaims: `DELETE FROM ${claims} WHERE claimed_at < ${AT} AND expires_at <= ${NOW}`,
    purgeLiveClaims: `DELETE FROM ${claims} WHERE claimed_at < ${AT}`,
    // The claims purgeLiveClaims would delete that still hold their key (by the database's clock): the CLI refuses
    // a purge that would delete one unless asked for, as a resend of it would be credited again.
    liveClaims: `SELECT COUNT(*) AS count, ${msOf('MAX(expires_at)')} AS last_expires FROM ${claims}
      WHERE claimed_at < ${AT} AND expires_at > ${NOW}`,
    purgeDead: `DELETE FROM ${t} WHERE status = 'dead' AND updated_at < ${AT}`,
    // redact(): the records to blank (in JavaScript, one rule for every store), then each set only if unchanged
    // and still delivered or dead: a replay between the two (the entry received again) keeps its record whole.
    redactable: `SELECT \`key\`, record FROM ${t} WHERE status IN ('delivered', 'dead') AND received_at < ${AT}`,
    setRecord: `UPDATE ${t} SET record = ? WHERE \`key\` = ? AND record = ? AND status IN ('delivered', 'dead')`,
  };
}

/**
 * The quoted claims table beside inbox `table`: `<table>_claims` (schema version 7), in the same database,
 * within 64 characters: one row per key claimed at most once, with its token and time. A name too long is
 * cut as {@link distinctName} cuts it, not as the older side tables are: two inboxes whose names share their
 * first 57 characters must not share their claims (a key claimed in one would be refused in the other).
 */
export function mysqlClaimsTable(table: string): string {
  return mysqlClaimsName(table)
    .map((part) => `\`${part}\``)
    .join('.');
}

/** {@link mysqlClaimsTable} unquoted, as its parts: `[database?, name]`. */
export function mysqlClaimsName(table: string): string[] {
  const parts = mysqlTableNames(table).name.split('.');
  return [...parts.slice(0, -1), distinctName(parts.at(-1)!, '_claims', 64)];
}

/**
 * The quoted table `<table><suffix>` beside inbox `table`, in the same database, its name cut to MySQL's 64
 * characters. `owner` names the caller in the message of a bad name.
 * @throws TypeError when `table` is not such a name.
 */
export function mysqlBeside(table: string, suffix: string, owner?: string): string {
  const parts = mysqlTableNames(table, owner).name.split('.');
  const name = parts.pop()!;
  return [...parts, `${name.slice(0, 64 - suffix.length)}${suffix}`].map((part) => `\`${part}\``).join('.');
}

/** The quoted audit table beside inbox `table`: `<table>_audit`, in the same database, within 64 characters. */
export const mysqlAuditTable = (table: string): string => mysqlBeside(table, '_audit');

/**
 * The SQL that creates the audit table beside the inbox `table` (`<table>_audit`: one row per operator
 * action, its time in milliseconds since the epoch), for teams that run their own migrations;
 * `MysqlStore.migrate()` runs it too, as a statement of its own. Idempotent.
 */
export function mysqlAuditSql(table = 'ipn_inbox'): string {
  return `CREATE TABLE IF NOT EXISTS ${mysqlAuditTable(table)} (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  at_ms BIGINT NOT NULL,
  action VARCHAR(64) NOT NULL,
  actor VARCHAR(255) NOT NULL,
  detail LONGTEXT NOT NULL
) DEFAULT CHARSET = utf8mb4`;
}

/** The statements of {@link mysqlInboxSql}. */
export type MysqlInboxSql = ReturnType<typeof mysqlInboxSql>;

/**
 * The session counts (`Com_*`, lower-cased) of the statements that never end a transaction: DML, reads,
 * savepoints, prepared and compound statements, `CALL` (a statement inside a procedure counts as itself),
 * `SHOW`, temporary tables on MariaDB. Every other count is taken for a statement that commits implicitly.
 * Not a list of the implicit commits: each server version has its own, and one missing from such a list
 * (MariaDB's `CREATE SEQUENCE`, `CREATE ROLE`, `SET PASSWORD`, or `SET autocommit = 0` then `1`, counted as
 * `Com_set_option`) was taken for a deadlock's rollback, and its writes retried and committed twice. A
 * count wrongly left out here costs at most a dead entry, and only once the transaction ended anyway.
 */
export const NEVER_COMMITS =
  /^com_(select|insert|insert_select|update|update_multi|delete|delete_multi|replace|replace_select|load|savepoint|release_savepoint|rollback_to_savepoint|do|change_db|empty_query|call_procedure|compound_sql|prepare_sql|execute_sql|execute_immediate|dealloc_sql|get_diagnostics|signal|resignal|checksum|help|ha_open|ha_close|ha_read|create_temporary_table|drop_temporary_table|stmt_\w+|show_\w+)$/;

/**
 * What the ORM path runs besides the mark, to tell whether a listener ended the delivery's transaction
 * through `tx` (MySQL has no `txid_status`, and MySQL 8 no `@@in_transaction`; `information_schema.innodb_trx`
 * needs the PROCESS privilege). The savepoint, set when the transaction opens, is gone once anything ends
 * that transaction: a `COMMIT` or `ROLLBACK` sent through `tx`, a statement that commits implicitly, or a
 * deadlock that InnoDB rolled back (after which, on MariaDB 10.11 at least, the session autocommits). The
 * session's statement counts (`SHOW STATUS` needs no privilege), read at the opening and again when the
 * savepoint is gone, tell a raw `COMMIT` (the writes landed) and an implicit commit (any count but
 * {@link NEVER_COMMITS}) from a rollback (see `mysqlOrmMark`). The savepoint's `name` is
 * `ipn_kit_delivery_` and a suffix no listener can know: one that rolled back to it through `tx` would undo
 * its writes, and have them marked delivered.
 */
export const mysqlOrmSql = {
  savepoint: (name: string) => `SAVEPOINT ${name}`,
  release: (name: string) => `RELEASE SAVEPOINT ${name}`,
  // `\_` in the SQL: a literal '_' (a bare '_' matches any character: `Compression`, whose value is no number).
  ends: "SHOW SESSION STATUS LIKE 'Com\\_%'",
};
