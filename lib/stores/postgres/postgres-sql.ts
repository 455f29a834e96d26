import { PERSONAL_FIELDS } from '../store.js';
import { distinctName, olderClaim, tableParts } from '../schema-migrations.js';
/** Index names get this suffix; the table part is shortened so that the whole stays within 63 bytes. */
const INDEX_SUFFIX = '_due_idx';

/** A table name checked and quoted for SQL, with the names derived from it. */
export interface TableNames {
  /** As given: `ipn_inbox` or `schema.ipn_inbox`. */
  name: string;
  /** Quoted for SQL: `"ipn_inbox"` or `"schema"."ipn_inbox"`. */
  quoted: string;
  /** The quoted name of the index of due entries (created in the table's schema). */
  dueIndex: string;
}

/**
 * Checks `table` (`name` or `schema.name`, each of letters, digits and underscores, not starting with a
 * digit) and quotes it. Names are quoted, so they are case-sensitive: `Inbox` is not `inbox`.
 * @throws TypeError when `table` is not such a name.
 */
export function tableNames(table: unknown, owner = 'PostgresStore'): TableNames {
  const parts = tableParts(owner, table, 63); // PostgreSQL's 63 bytes
  const name = parts[parts.length - 1]!;
  return {
    name: table as string,
    quoted: parts.map((part) => `"${part}"`).join('.'),
    dueIndex: `"${name.slice(0, 63 - INDEX_SUFFIX.length)}${INDEX_SUFFIX}"`,
  };
}

const STATES_SUFFIX = '_states';

/**
 * The lifecycle table beside the quoted inbox table: `<table>_states`, in the same schema, one row per
 * transaction (its accepted final state).
 */
export function statesTable(quoted: string): string {
  return besideQuoted(quoted, STATES_SUFFIX);
}

/** `<name><suffix>` beside the quoted table `quoted`, in its schema, within PostgreSQL's 63 bytes, quoted. */
function besideQuoted(quoted: string, suffix: string): string {
  const parts = quoted.split('.');
  const name = (parts.pop() as string).slice(1, -1);
  return [...parts, `"${name.slice(0, 63 - suffix.length)}${suffix}"`].join('.');
}

/**
 * The quoted claims table beside inbox `table`: `<table>_claims` (schema version 7), one row per key claimed
 * at most once, with its token and time. A name too long for 63 bytes is cut as {@link distinctName} cuts
 * it, not as the older side tables are: two inboxes whose names share their first 56 bytes must not share
 * their claims (a key claimed in one would be a duplicate, even a refused receive, in the other).
 * @throws TypeError when `table` is not such a name.
 */
export function claimsTable(table: string): string {
  const parts = tableNames(table).name.split('.');
  const name = distinctName(parts.pop()!, '_claims', 63);
  return [...parts, name].map((part) => `"${part}"`).join('.');
}

/**
 * The quoted name `<table><suffix>` beside inbox `table` (a table or function of its set: `_expected`,
 * `_control`, `_mark`), in its schema, within PostgreSQL's 63 bytes.
 * @throws TypeError when `table` is not such a name.
 */
export function besideInbox(table: string, suffix: string): string {
  return besideQuoted(tableNames(table).quoted, suffix);
}

/** The customer's fields set to `""`, as a jsonb to merge: {@link PERSONAL_FIELDS} in PostgreSQL's dialect. */
const BLANKS = `'${JSON.stringify(Object.fromEntries(PERSONAL_FIELDS.map((f) => [f, ''])))}'::jsonb`;

/** A row's record is `{}`: with {@link olderClaim}, an older ipn-kit's claim, which version 7 leaves in the inbox. */
export const EMPTY_RECORD = "record = '{}'::jsonb";

/** Not an older ipn-kit's claim: every read, count and replay of entries has it (see {@link olderClaim}). */
const ENTRY = `NOT ${olderClaim(EMPTY_RECORD)}`;

/** The columns an `InboxEntry` is read from. */
const COLUMNS =
  'key, transaction_id, state, record, status, attempts, last_error, received_at, updated_at, next_attempt_at, delivered_at, lease_until';

/** `$n` milliseconds after the database's now. */
const FROM_NOW = (n: number): string => `now() + $${n}::double precision * interval '1 millisecond'`;

/**
 * `text` as an escape string literal (`E'...'`, its quotes and backslashes doubled), which reads the same
 * whatever `standard_conforming_strings` says. `text` holds no NUL (checked by the caller: PostgreSQL has
 * no such character in text, and the protocol would end the query there).
 */
export function literal(text: string): string {
  return `E'${text.replaceAll('\\', '\\\\').replaceAll("'", "''")}'`;
}

/**
 * `text` (a statement of {@link inboxSql} with `$n` parameters, none inside a literal of its own) with each
 * `$n` replaced by its value as a literal: a string as a {@link literal} (typed by the statement's cast,
 * or by the column it is compared with), a number as the literal of its digits, a string array as an
 * `ARRAY[...]`, `null` as `NULL`. For a simple query, which takes no parameters. The text is scanned once:
 * a `$n` inside a value stays as it is.
 * @throws TypeError for a value of another kind, a number that is not finite, a string holding a NUL, or a
 * `$n` with no value: a programmer error of the store's.
 */
export function inline(text: string, values: readonly unknown[]): string {
  const one = (value: unknown): string => {
    if (value === null) return 'NULL';
    if (typeof value === 'number' && Number.isFinite(value)) return literal(String(value));
    if (typeof value === 'string' && !value.includes('\0')) return literal(value);
    throw new TypeError(`PostgresStore: a value cannot stand in a simple query (${typeof value})`);
  };
  return text.replace(/\$(\d+)/g, (placeholder, n: string) => {
    if (Number(n) < 1 || Number(n) > values.length) {
      throw new TypeError(`PostgresStore: ${placeholder} has no value (${values.length} given)`);
    }
    const value = values[Number(n) - 1];
    return Array.isArray(value) ? `ARRAY[${value.map(one).join(', ')}]` : one(value);
  });
}

/** What a key or lease id may hold to stand in SQL as a literal as it is: no quote, no backslash. */
const PLAIN = /^[A-Za-z0-9._:-]{1,200}$/;

/**
 * Where the delivery transaction whose id (`$1`) the ORM path's opening read stands, asked when its attempt
 * failed: `committed` once a listener committed it through `tx` (a raw `COMMIT`), `aborted` after a raw
 * `ROLLBACK`; still open, `in progress`, or the statement fails (an aborted transaction).
 */
export const TRANSACTION_STATUS = 'SELECT txid_status($1::bigint) AS status';

/** The SQLSTATE `markAndCommit` raises when the lease was lost: ipn-kit's own ("IK": no class of PostgreSQL's). */
export const LEASE_LOST = 'IK001';

/**
 * Sent before the mark and COMMIT of a delivery whose listener changed a setting of the session through `db` (a
 * rollback undoes it by itself), and before the mark of every delivery through an ORM's `tx`: the settings go
 * back to the session's start (its startup parameters, the role's and database's settings), so that none
 * outlives the delivery: through a transaction-mode pooler the connection serves other clients next. It
 * resets custom variables too (`app.tenant_id`), which no view lists. It leaves the role and the session
 * authorization as they are. What the session had set before the delivery (the pool's `connect` event) goes
 * too, so {@link restoreSession} sets it back next, from the settings read before the listeners set any.
 */
export const RESET = 'RESET ALL';

/**
 * The session authorization and role, which {@link RESET} leaves: all the ORM path's opening reads with
 * `sessionSettings: 'reset'` (no scan of `pg_settings`), for the mark to set them back.
 */
const AUTHORIZATION = `VALUES ('session_authorization', current_setting('session_authorization')),
    ('role', current_setting('role'))`;

/**
 * The settings of the session as the ORM path's opening reads them, before a delivery's listeners run: each
 * setting set in the session (`SET`, `set_config(..., false)`, and `SET LOCAL` while its transaction is open:
 * `pg_settings`' source `session`), by name with its value as `current_setting` shows it; and the session
 * authorization and role, which `pg_settings` does not list. Nor does it list a custom variable no loaded
 * module defines (`app.tenant`): those are not in it, and {@link RESET} resets them.
 */
const SESSION_SETTINGS = `SELECT name, current_setting(name) AS setting FROM pg_settings WHERE source = 'session'
  UNION ALL ${AUTHORIZATION}`;

/**
 * The settings of the session as {@link SESSION_SETTINGS} reads them, as one JSON object (`settings`): what
 * {@link restoreSession} takes.
 */
const settingsJson = (settings: string): string =>
  `(SELECT json_object_agg(name, setting)::text FROM (${settings}) AS session (name, setting))`;

/** {@link SESSION_SETTINGS} as one JSON object: read before a listener's first setting through `db`. */
export const SESSION_SNAPSHOT = `SELECT ${settingsJson(SESSION_SETTINGS)} AS settings`;

/**
 * Sets back, after {@link RESET} (sent just before it, in the same transaction), the settings of the session
 * as they were before the delivery (`settings`, SQL: {@link SESSION_SETTINGS} as read then, a JSON object): each
 * one whose value is not that now is set to it, at session level, so that it holds after the `COMMIT`. So
 * what the pool's `connect` event, Knex's `searchPath` or the pooler set before the delivery stays, and
 * whatever a listener set, reset or added goes. The session authorization goes back first; then, when any
 * other setting is to be set back, the role is set to none for the transaction alone (the session user: a
 * superuser's setting of the pool's `connect` event, set before it dropped to the app's role, may not be
 * set under that role, nor under a role a listener set), those settings, and the role last: to what it was
 * for the session; or, when `settings` has no role (a listener's SET LOCAL ROLE showed in place of the
 * session's), to what it is now, for the transaction alone, so that the session's comes back at the
 * `COMMIT`. Settings that RESET ALL leaves (the transaction's isolation and access mode) are as they were,
 * so not set. Only `current_setting` is read by name: no scan of `pg_settings`; every value is read before
 * any is set (the sort reads them all first). The delivery's transaction holds it all: a rollback undoes
 * the listener's settings, the reset and these alike. Resolves how many it set (`settings`).
 */
export const restoreSession = (
  settings: string,
): string => `SELECT count(set_config(name, was, local))::int AS settings FROM (
        WITH before AS (
          SELECT key AS name, value AS was, current_setting(key, true) IS DISTINCT FROM value AS differs
          FROM json_each_text(${settings}::json)
        ), others AS (
          SELECT name, was FROM before WHERE differs AND name NOT IN ('session_authorization', 'role')
        )
        SELECT name, was, false AS local, 0 AS step FROM before WHERE differs AND name = 'session_authorization'
        UNION ALL SELECT 'role', 'none', true, 1 WHERE EXISTS (SELECT FROM others)
        UNION ALL SELECT name, was, false, 2 FROM others
        UNION ALL SELECT name, was, false, 3 FROM before
          WHERE name = 'role' AND (differs OR EXISTS (SELECT FROM others))
        UNION ALL SELECT 'role', current_setting('role'), true, 3
          WHERE EXISTS (SELECT FROM others) AND NOT EXISTS (SELECT FROM before WHERE name = 'role')
        ORDER BY step
      ) AS changed`;

/**
 * What goes before the mark of a delivery through `db` whose listener changed a setting of the session:
 * {@link RESET}, then {@link restoreSession} of `settings` (the JSON {@link SESSION_SNAPSHOT} read before the
 * listener's first setting; none: the reset alone), as statements of one simple query, each ending with `; `.
 * The JSON stands in it as a {@link literal}.
 */
export function resetSession(settings: string | undefined): string {
  if (settings === undefined) return `${RESET}; `;
  return `${RESET}; ${restoreSession(literal(settings))}; `;
}

/** A schema name as `quote_ident` gives it: what the ORM path's opening reads may stand in SQL as it is. */
const QUOTED_SCHEMA = /^(?:[a-z_][a-z0-9_$]*|"(?:[^"]|"")+")$/;

/** Lease columns cleared when an attempt ends. */
const END_LEASE = 'lease_id = NULL, lease_until = NULL, updated_at = now()';

/**
 * The rows of a batch of receives, from `$1`: a JSON array of the objects {@link receivesJson} writes, but
 * those whose key is claimed in `claims` (the quoted `<table>_claims`): a claim and a receive of one key
 * exclude each other, as when both were rows of the inbox.
 */
const receivedRows = (
  claims: string,
  guard: string,
): string => `u.key, u.transaction_id, u.state, u.record, 'received', 1, u.lease_id,
        now() + u.ms * interval '1 millisecond'
      FROM jsonb_to_recordset($1::jsonb)
        AS u(key text, transaction_id text, state text, record jsonb, lease_id text, ms double precision)
      WHERE ${guard}NOT EXISTS (SELECT 1 FROM ${claims} AS c WHERE c.key = u.key AND c.expires_at > now())
      ORDER BY u.key`;

/**
 * Whether the statement's transaction reads with a snapshot per statement (`READ COMMITTED`, which
 * PostgreSQL also gives for `READ UNCOMMITTED`): then an insert's snapshot to execute comes after the
 * ROW EXCLUSIVE lock its parse analysis took, hence after any claim it waited for. Under `REPEATABLE READ`
 * or `SERIALIZABLE` its snapshot is the transaction's first, taken before that lock. Per statement, so a
 * connection whose default differs (a role's, a pool's `options`) is seen as it is.
 */
const SNAPSHOT_PER_STATEMENT = `current_setting('transaction_isolation') IN ('read committed', 'read uncommitted')`;

/**
 * The SQLSTATE (`division_by_zero`) a guarded statement of {@link receiveStatements} fails with when its
 * session is not {@link SNAPSHOT_PER_STATEMENT}: it has then written nothing, and the store sends it again
 * after its lock. Another failure with this code (a partner's trigger) only sends it again the same way,
 * where it fails as it would have.
 */
export const NOT_READ_COMMITTED = '22012';

/**
 * A condition true under {@link SNAPSHOT_PER_STATEMENT} that fails the statement ({@link NOT_READ_COMMITTED})
 * otherwise. Holding no column, PostgreSQL checks it once, before the first row (a one-time filter), at the
 * cost of one `current_setting`: READ COMMITTED pays for nothing more. Not a constant, so never folded (and
 * failed) when planned.
 */
const READ_COMMITTED_OR_FAIL = `1 / (CASE WHEN ${SNAPSHOT_PER_STATEMENT} THEN 1 ELSE 0 END) = 1`;

/**
 * The statements that insert into the inbox. `guarded` (the default path): each fails, having written
 * nothing, unless {@link SNAPSHOT_PER_STATEMENT} (see {@link READ_COMMITTED_OR_FAIL}): the store then sends
 * it again unguarded, after `lockInbox` in the same transaction. `receive` answers its count;
 * `receiveMany` the keys it received; `receiveAndDeliverMany` those (`key`, `lease_id` NULL) and the
 * settlements it made (`key`, `lease_id`).
 */
function receiveStatements(t: string, claims: string, guarded: boolean) {
  const guard = guarded ? `${READ_COMMITTED_OR_FAIL} AND ` : '';
  const rows = receivedRows(claims, guard);
  const columns = 'key, transaction_id, state, record, status, attempts, lease_id, lease_until';
  return {
    // Not while the key is claimed (at most once, by an instance in that mode): a duplicate, as when both
    // were rows of the inbox; an expired claim no longer holds the key (as in RedisStore and MemoryStore).
    // The claim's primary key makes it one index lookup.
    receive: `INSERT INTO ${t} (${columns})
      SELECT $1::text, $2::text, $3::text, $4::jsonb, 'received', 1, $5::text, ${FROM_NOW(6)}
      WHERE ${guard}NOT EXISTS (SELECT 1 FROM ${claims} WHERE key = $1 AND expires_at > now())
      ON CONFLICT (key) DO NOTHING`,
    // Group commit: many receives in one statement, given as one JSON array of rows ($1, see receivesJson):
    // a record goes into it as its JSON text, where a text[] parameter would escape each of its quotes.
    // Keys are unique within a batch (the store sees to it), and inserted in key order, so that two
    // instances inserting overlapping batches (a burst resent to both) take the keys' locks in the same
    // order, and never deadlock.
    receiveMany: `INSERT INTO ${t} (${columns})
      SELECT ${rows}
      ON CONFLICT (key) DO NOTHING RETURNING key`,
    // Group commit of both: receives ($1, as for receiveMany) and `delivered` settlements ($2, $3) that
    // arrive together, as one statement and one commit. A settlement never meets its own receive here: an
    // entry is leased, so settled, only once its receive has answered. Guarded, a failure writes neither.
    receiveAndDeliverMany: `WITH received AS (
        INSERT INTO ${t} (${columns})
        SELECT ${rows}
        ON CONFLICT (key) DO NOTHING RETURNING key
      ), delivered AS (
        UPDATE ${t} AS inbox SET status = 'delivered', delivered_at = now(),
          lease_id = NULL, lease_until = NULL, updated_at = now()
        FROM unnest($2::text[], $3::text[]) AS u(key, lease_id)
        WHERE ${guard}inbox.key = u.key AND inbox.lease_id = u.lease_id RETURNING inbox.key, u.lease_id
      )
      SELECT key, NULL AS lease_id FROM received UNION ALL SELECT key, lease_id FROM delivered`,
  };
}

/**
 * A batch of receives (each: key, transaction id, state, the record's stored JSON text, lease id, lease ms)
 * as the JSON array that `receiveMany` and `receiveAndDeliverMany` take. The records are spliced in as the
 * JSON they are; the keys and lease ids hold no NUL or lone surrogate (checked), which `jsonb` would refuse.
 */
export function receivesJson(receives: ReadonlyArray<readonly unknown[]>): string {
  let json = '[';
  for (const [key, transactionId, state, record, leaseId, ms] of receives) {
    if (json.length > 1) json += ',';
    json +=
      `{"key":${JSON.stringify(key)},"transaction_id":${JSON.stringify(transactionId)},` +
      `"state":${JSON.stringify(state)},"record":${record as string},` +
      `"lease_id":${JSON.stringify(leaseId)},"ms":${JSON.stringify(ms)}}`;
  }
  return `${json}]`;
}

const MARK_SUFFIX = '_mark';

/**
 * The quoted name of the mark function beside inbox `table`: `<table>_mark`, in its schema. A name too long
 * for PostgreSQL's 63 bytes is cut and given a hash of the whole (`<cut>_<8 hex>_mark`): two inboxes whose
 * names share their first 58 bytes would otherwise share one function, the second migrate() replacing the
 * first's, whose marks would then find no lease in the other inbox and roll back every delivery.
 */
export function markFunction(table: string): string {
  return functionBeside(table, MARK_SUFFIX);
}

/** The quoted name of a function `<table><suffix>` in the inbox's schema, cut as {@link markFunction} says. */
function functionBeside(table: string, suffix: string): string {
  const parts = tableNames(table).name.split('.');
  const name = distinctName(parts.pop()!, suffix, 63);
  return [...parts, name].map((part) => `"${part}"`).join('.');
}

/**
 * The quoted name of the function `<table>_older_claim` beside inbox `table` (schema version 7), cut as
 * {@link markFunction} is: the trigger that lets an older ipn-kit ask again about a claim it made before
 * version 7 (see `claimsSteps` in postgres-schema.ts).
 */
export function olderClaimFunction(table: string): string {
  return functionBeside(table, '_older_claim');
}

/** The `delivered` mark of the entry `key` held by lease `leaseId` (SQL expressions), in PL/pgSQL. */
const markBody = (t: string, key: string, leaseId: string): string =>
  `UPDATE ${t} SET status = 'delivered', delivered_at = now(), ${END_LEASE}
            WHERE key = ${key} AND lease_id = ${leaseId};
            IF NOT FOUND THEN
              RAISE EXCEPTION 'ipn-kit: the lease on % was lost', ${key} USING ERRCODE = '${LEASE_LOST}';
            END IF;`;

/**
 * The function `<table>_mark(key, lease_id)` (schema version 6): marks the entry `delivered` and ends its
 * lease, or raises {@link LEASE_LOST} when the lease no longer holds it. The exactly-once path sends it with
 * the `COMMIT`; a function's compiled body and plan are kept by the session, a `DO` block's are not.
 */
export function markFunctionSql(table: string): string {
  const t = tableNames(table).quoted;
  return `CREATE OR REPLACE FUNCTION ${markFunction(table)}(mark_key text, mark_lease text) RETURNS void
  LANGUAGE plpgsql AS $ipn_kit$ BEGIN
            ${markBody(t, 'mark_key', 'mark_lease')}
          END $ipn_kit$`;
}

/**
 * Every statement the store runs on `table`, with `$n` parameters for every value. Each compares times with
 * the database's `now()`, so that instances whose clocks disagree still agree on what is due and leased.
 */
export function inboxSql(table: string) {
  const t = tableNames(table).quoted;
  const claims = claimsTable(table);
  const mark = markFunction(table); // named once: markAndCommit runs for every delivery
  return {
    // A claim is a row of <table>_claims (schema version 7), never of the inbox: it is taken only while the
    // inbox has no row of the key (a receive of it came first: a resend; or an older ipn-kit's claim, left
    // there by version 7: see olderClaim), and the key's claim, if any, has
    // expired (ttlMs): then it is taken over, in the same statement. Two at once after the expiry: the
    // second waits for the first's row lock, then finds the row live again and changes nothing. Its token
    // is kept, so that the same claim asked again (its answer was lost) is recognised as this caller's own:
    // true, not a resend. Both are read from the row's latest version, which the conflict locks, never from
    // the statement's snapshot: that one may predate another token's takeover the claim waited for (its
    // now() before the expiry, the takeover's after), and would still show this token's claim live. The
    // same token asked again keeps its claim's times.
    // A claim and a receive of one key (two instances in different delivery modes, as in a deploy that
    // switches it) must not both be first, yet each reads the other's table in its own statement's
    // snapshot, with no row in common to lock. So the claim first takes the inbox in SHARE mode, which
    // waits for every transaction writing the inbox (a receive holds ROW EXCLUSIVE from before its snapshot
    // until it commits) and holds off new ones until the claim commits; its statement's snapshot, taken
    // after the lock, sees the receive that went first, and a receive that comes after sees the claim.
    // SHARE does not conflict with itself: claims never wait for each other on it. The statements go as
    // one simple query (one round trip, one implicit transaction), the values as literals. A claim waits
    // for the lock at most `waitMs` (the router's storeTimeoutMs, which has answered 503 by then): one stuck
    // behind a long write of the inbox fails, and gives its connection back to the pool.
    claim: (key: string, token: string, ttlMs: number, waitMs: number) => `SET LOCAL lock_timeout = ${literal(
      `${Math.max(1, Math.ceil(waitMs))}ms`,
    )};
      LOCK TABLE ${t} IN SHARE MODE;
      WITH taken AS (
        INSERT INTO ${claims} AS c (key, token, claimed_at, expires_at)
        SELECT ${literal(key)}::text, ${literal(token)}::text, now(),
          now() + ${literal(String(ttlMs))}::double precision * interval '1 millisecond'
        WHERE NOT EXISTS (SELECT 1 FROM ${t} WHERE key = ${literal(key)})
        ON CONFLICT (key) DO UPDATE
          SET token = excluded.token,
            claimed_at = CASE WHEN c.expires_at <= now() THEN excluded.claimed_at ELSE c.claimed_at END,
            expires_at = CASE WHEN c.expires_at <= now() THEN excluded.expires_at ELSE c.expires_at END
          WHERE c.expires_at <= now() OR c.token = excluded.token
        RETURNING 1
      )
      SELECT EXISTS (SELECT 1 FROM taken) AS claimed`,
    ...receiveStatements(t, claims, true),
    // The same, unguarded: each sent after `lockInbox`, in its transaction, once a guarded one found its
    // session not READ COMMITTED.
    locked: receiveStatements(t, claims, false),
    // Sent before a `locked` statement, in its transaction: a utility statement, it takes no snapshot, so the
    // insert's snapshot comes after the lock. The insert would take ROW EXCLUSIVE anyway, but in its parse
    // analysis, after its snapshot under REPEATABLE READ (a transaction's snapshot is its first): waiting
    // there for a claim's SHARE lock, it would then not see that claim, and both would be first.
    lockInbox: `LOCK TABLE ${t} IN ROW EXCLUSIVE MODE`,
    release: `DELETE FROM ${t} WHERE key = $1 AND ($2::text IS NULL OR lease_id = $2)`,
    releaseClaim: `DELETE FROM ${claims} WHERE key = $1`,
    // SKIP LOCKED: a concurrent lease passes over the rows another one is taking instead of waiting for them,
    // and re-checks each row it locks, so no row is ever leased twice at once. RETURNING has no order of its
    // own: the outer SELECT gives the oldest first again.
    // One statement: the row goes from the contradicted copy to the service's record, never through absent.
    replace: `UPDATE ${t} SET record = $3::jsonb, status = 'received', attempts = 1, last_error = NULL,
        next_attempt_at = now(), lease_id = $4, lease_until = ${FROM_NOW(5)}, updated_at = now()
      WHERE key = $1 AND lease_id = $2`,
    lease: `WITH due AS (
        SELECT key FROM ${t}
        WHERE status IN ('received', 'failed') AND next_attempt_at <= now()
          AND (lease_until IS NULL OR lease_until < now())
        ORDER BY received_at, key
        LIMIT $3
        FOR UPDATE SKIP LOCKED
      ), taken AS (
        UPDATE ${t} AS inbox
        SET lease_id = $1, lease_until = ${FROM_NOW(2)}, attempts = inbox.attempts + 1, updated_at = now()
        FROM due WHERE inbox.key = due.key
        RETURNING ${COLUMNS.split(', ')
          .map((column) => `inbox.${column}`)
          .join(', ')}
      )
      SELECT * FROM taken ORDER BY received_at, key`,
    delivered: `UPDATE ${t} SET status = 'delivered', delivered_at = now(), ${END_LEASE}
      WHERE key = $1 AND lease_id = $2`,
    // The mark inside an ORM's transaction: whether it marked the entry, and whether that transaction sees
    // the entry at all (the main query reads the table as it was before the update). An ORM pointed at
    // another database or schema, whose own inbox table has no such key, must not pass for a lost lease.
    // The ORM path's opening, before any listener runs: the transaction's id, forced now; the session's
    // settings as they are (see SESSION_SETTINGS), which the mark sets back; and, for a table named without
    // its schema, the schema it is found in now, so that the mark finds the same table whatever search_path
    // a listener set.
    // `keep`: the session's own settings are read, for the mark to set back (`sessionSettings: 'restore'`);
    // otherwise only its authorization and role.
    ormOpening: (keep = true): string => `SELECT txid_current()::text AS xid,
        ${settingsJson(keep ? SESSION_SETTINGS : AUTHORIZATION)} AS settings,
        ${
          t.includes('.')
            ? 'NULL::text'
            : `(SELECT quote_ident(n.nspname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE c.oid = to_regclass('${t}'))`
        } AS schema`,
    // The ORM path's mark. $3 is the delivery transaction's id: when a listener ended that transaction
    // through `tx` with a raw ROLLBACK, this statement runs on its own (autocommit) and would commit
    // `delivered` with the ledger writes undone; `rolled_back` says so and nothing is marked. (After a raw
    // COMMIT the writes have landed, and marking them delivered is right.) $4 is the session's settings as
    // `ormOpening` read them: sent after RESET, the same statement sets them back (see restoreSession).
    // `schema`: where `ormOpening` found the table (quoted), for a table named without one.
    deliveredInOrm: (schema?: string | null): string => {
      const table = schema && !t.includes('.') && QUOTED_SCHEMA.test(schema) ? `${schema}.${t}` : t;
      return `WITH ended AS (SELECT txid_status($3::bigint) = 'aborted' AS rolled_back),
      marked AS (
        UPDATE ${table} SET status = 'delivered', delivered_at = now(), ${END_LEASE}
        WHERE key = $1 AND lease_id = $2 AND NOT (SELECT rolled_back FROM ended) RETURNING 1
      ),
      restored AS (${restoreSession('$4')})
      SELECT (SELECT count(*) FROM marked)::int AS marked, EXISTS (SELECT 1 FROM ${table} WHERE key = $1) AS seen,
        (SELECT rolled_back FROM ended) AS rolled_back, (SELECT settings FROM restored) AS restored`;
    },
    // The `delivered` mark and the COMMIT of a delivery transaction, as one simple query: one round trip
    // where two would do. Only for a key and lease id of plain characters (a
    // transaction id is, by the schema; a lease id is a UUID), which stand in it as literals; `undefined` for
    // any other. When the lease no longer holds the entry, the mark updates nothing and raises LEASE_LOST:
    // PostgreSQL then skips the COMMIT after it, and the caller rolls back. The mark is the function
    // `<table>_mark` (schema version 6, see markFunctionSql), whose compiled body and plan the session keeps;
    // without `useFunction` (a database whose function is missing), the same body as a DO block, which
    // PL/pgSQL compiles and plans anew on every call (150 to 200 µs more of PostgreSQL's CPU a payment:
    // bench/README.md, "Where the durable variants' time goes").
    // `before`: statements sent first, in the same query (resetSession).
    markAndCommit: (key: string, leaseId: string, useFunction = true, before = ''): string | undefined =>
      PLAIN.test(key) && PLAIN.test(leaseId)
        ? `${before}${
            useFunction
              ? `SELECT ${mark}('${key}', '${leaseId}')`
              : `DO $ipn_kit$ BEGIN ${markBody(t, `'${key}'`, `'${leaseId}'`)} END $ipn_kit$`
          }; COMMIT`
        : undefined,
    // Group commit: many `delivered` settlements in one statement, each still guarded by its lease.
    deliveredMany: `UPDATE ${t} AS inbox SET status = 'delivered', delivered_at = now(),
        lease_id = NULL, lease_until = NULL, updated_at = now()
      FROM unnest($1::text[], $2::text[]) AS u(key, lease_id)
      WHERE inbox.key = u.key AND inbox.lease_id = u.lease_id RETURNING inbox.key, u.lease_id`,
    failed: `UPDATE ${t} SET status = 'failed', last_error = $3, next_attempt_at = $4, ${END_LEASE}
      WHERE key = $1 AND lease_id = $2`,
    dead: `UPDATE ${t} SET status = 'dead', last_error = $3, ${END_LEASE} WHERE key = $1 AND lease_id = $2`,
    // Each filter is off when its parameter is null.
    list: (newest: boolean) => `SELECT ${COLUMNS} FROM ${t}
      WHERE ($3::text IS NULL OR status = $3)
        AND ($4::text IS NULL OR transaction_id = $4)
        AND ($5::text IS NULL OR strpos(lower(coalesce(record->>'custom_data', record->>'ipn-kit:json')), lower($5)) > 0)
        AND ($6::timestamptz IS NULL OR received_at >= $6)
        AND ($7::timestamptz IS NULL OR received_at < $7)
        AND ${ENTRY}
      ORDER BY ${newest ? 'received_at DESC, key DESC' : 'received_at, key'} LIMIT $1 OFFSET $2`,
    countByStatus: `SELECT status, count(*)::int AS count FROM ${t}
      WHERE ($1::timestamptz IS NULL OR received_at >= $1) AND ${ENTRY} GROUP BY status`,
    get: `SELECT ${COLUMNS} FROM ${t} WHERE key = $1 AND ${ENTRY}`,
    // A replay keeps a live lease (an attempt still running finishes first, alone), and passes over an
    // older ipn-kit's claim, which holds no notification to deliver.
    replay: `UPDATE ${t} SET status = 'received', attempts = 0,
        next_attempt_at = now() + $2::bigint * interval '1 millisecond', updated_at = now()
      WHERE key = $1 AND ($3::text[] IS NULL OR status = ANY($3::text[])) AND ${ENTRY}`,
    // The service's record in place of a kept copy's, made due in the same write: never under a live lease.
    replayWith: `UPDATE ${t} SET record = $2::jsonb, status = 'received', attempts = 0,
        next_attempt_at = now(), updated_at = now()
      WHERE key = $1 AND status = ANY($3::text[]) AND (lease_until IS NULL OR lease_until < now())
        AND ${ENTRY}`,
    purge: `DELETE FROM ${t} WHERE status = 'delivered' AND delivered_at < $1`,
    purgeClaims: `DELETE FROM ${claims} WHERE claimed_at < $1 AND expires_at <= now()`,
    purgeLiveClaims: `DELETE FROM ${claims} WHERE claimed_at < $1`,
    // The claims purgeLiveClaims would delete that still hold their key (by the database's clock): the CLI refuses
    // a purge that would delete one unless asked for, as a resend of it would be credited again.
    liveClaims: `SELECT count(*)::int AS count, max(expires_at) AS last_expires FROM ${claims}
      WHERE claimed_at < $1 AND expires_at > now()`,
    purgeDead: `DELETE FROM ${t} WHERE status = 'dead' AND updated_at < $1`,
    // Only rows that still hold a name or a number: a second pass changes nothing and counts nothing.
    redact: `UPDATE ${t} SET record = record || ${BLANKS}
      WHERE status IN ('delivered', 'dead') AND received_at < $1
        AND (${PERSONAL_FIELDS.map((f) => `coalesce(record->>'${f}', '') <> ''`).join(' OR ')})`,
  };
}

/** The statements of {@link inboxSql}. */
export type InboxSql = ReturnType<typeof inboxSql>;
