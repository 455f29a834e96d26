import { LEASE_LOST, resetSession, SESSION_SNAPSHOT } from './postgres-sql.js';
import { openPoolTransaction, type PoolSide } from '../pool-transaction.js';
import { DeliveryError, messageOf, StoreError } from '../../shared/errors.js';
import type { DeliveryTransaction } from '../store.js';

/**
 * How a delivery transaction marks its entry delivered: `statement` (changing one row while the lease holds,
 * none once it was lost), then `COMMIT`; or the query `andCommit()` gives, both in one simple query that
 * fails with {@link LEASE_LOST} when the lease was lost (`undefined` when the key cannot stand in it), after
 * the statements `before` (see `resetSession`: a listener changed a setting of the session). `andCommit` calls
 * the mark function of schema version 6; `functionUnusable` is told when the database has none, or the role
 * may not run it (the attempt fails, and the store sends the mark as a `DO` block from then on).
 */
export interface DeliveredMark {
  statement: [string, unknown[]];
  andCommit(before: string): string | undefined;
  functionUnusable?(): void;
}

/** PostgreSQL's SQLSTATE for a function that does not exist. */
const UNDEFINED_FUNCTION = '42883';
/** PostgreSQL's SQLSTATE for a privilege the role lacks (EXECUTE on the mark function, revoked from PUBLIC). */
const INSUFFICIENT_PRIVILEGE = '42501';

/**
 * Whether a refusal ({@link INSUFFICIENT_PRIVILEGE}) of the query that marks and commits is a privilege
 * check on an object (the mark function's EXECUTE, or the inbox table in it): PostgreSQL raises those
 * from `aclcheck_error`, and a refused setting (the set-back after `RESET ALL`) from elsewhere. An error
 * that does not say where it was raised (a driver that keeps no `routine`) counts as one: read as the
 * function's, the retries mark without it, which can only cost time; read as a setting's, a refused
 * function would fail every retry.
 */
function refusedExecute(error: unknown): boolean {
  const routine: unknown = Reflect.get(Object(error), 'routine');
  return typeof routine !== 'string' || routine === 'aclcheck_error';
}

/** A client a pool hands out (`pool.connect()`): what a delivery transaction runs on. */
export interface PgPoolClient {
  /** Runs one statement inside the transaction. */
  query(text: string, values?: unknown[]): Promise<{ rowCount: number | null }>;
  /** Gives the client back to its pool (destroying it when given `true` or an error). */
  release(destroy?: boolean | Error): void;
}

/** A pool as `pg` declares it: `connect()` hands out a client, or calls back with one. */
export interface PgConnectingPool<Client> {
  /** Hands out a client of the pool. */
  connect(): Promise<Client>;
  /** The callback form, which `pg` declares too. */
  connect(callback: never): void;
}

/** A pool with only the promise form of `connect()`. */
export interface PgPromisePool<Client> {
  /** Hands out a client of the pool. */
  connect(): Promise<Client>;
}

/**
 * The client type your pool hands out (a `pg` `PoolClient` for a `pg` `Pool`): the type of a listener's
 * `db` with {@link PostgresStore}. `never` for a pool that hands out none (a single `Client`): then listeners
 * get no `db`. Read from both of `connect`'s signatures, as `pg` declares two.
 */
export type PgClientOf<P> =
  P extends PgConnectingPool<infer Client>
    ? Client extends PgPoolClient
      ? Client
      : never
    : P extends PgPromisePool<infer Client>
      ? Client extends PgPoolClient
        ? Client
        : never
      : never;

/**
 * Whether `pool` hands out clients for transactions: it has `connect()`, and it is not itself a connected
 * `pg` `Client` (whose `connect()` connects it, and which carries a `connection`).
 */
export function canConnect(pool: object): pool is { connect(): Promise<unknown> } {
  return typeof Reflect.get(pool, 'connect') === 'function' && Reflect.get(pool, 'connection') === undefined;
}

/**
 * Opens a delivery transaction lazily, through {@link openPoolTransaction} (the seam every store's
 * transactions run through): nothing is taken from `pool` until a listener makes its first query through
 * `db`; that query takes a client, sends `BEGIN` on it, then runs. `commit` waits for every query the
 * listeners made (awaited or not), then runs `mark` (the `delivered` update, guarded by the lease) and
 * `COMMIT`, in one round trip when `andCommit` gives the query. An attempt whose listeners never query
 * `db` has nothing to make atomic and holds no client: `commit` calls `markWithout` instead (the store's
 * batched settlement). So listeners that write through your pool rather than `db` never wait for a client
 * that an idle attempt holds.
 *
 * `db` stands for that client: before its first query it offers what the pool's client class does
 * (`escapeLiteral`, and `instanceof` holds), after it the client itself. `release()` does nothing (ipn-kit
 * releases it), and a query made once the attempt has ended is refused, in the form it was made (a rejected
 * promise, marked handled; the callback called with the error; the submittable's `handleError`), so a
 * listener that outlives its attempt never writes outside the transaction. An `error` the connection emits
 * meanwhile (the server ended it) is kept, fails the commit, and never reaches the process.
 *
 * `BEGIN`, `COMMIT` and `ROLLBACK` sent through `db` (an ORM's transaction helper run on it: Drizzle's
 * `.transaction()`, Knex's `transaction(fn, { connection: db })`) become savepoints inside the delivery's
 * transaction, as the ORMs do for nested transactions: they never commit the delivery early. One that
 * cannot be mapped (a `COMMIT` with no `BEGIN` before it, `BEGIN ISOLATION LEVEL ...`, `PREPARE
 * TRANSACTION`) is refused with an error that names the fix. A listener that changed a setting of the
 * session has it undone ({@link RESET}) before the mark.
 */
export function openTransaction(
  pool: { connect(): Promise<unknown> },
  key: string,
  mark: DeliveredMark,
  markWithout: () => Promise<boolean>,
): Promise<DeliveryTransaction<unknown, unknown>> {
  let savepoints = 0; // BEGINs a listener sent through db, open as savepoints
  let setsSession = false; // a listener changed a setting of the session: RESET ALL before the mark
  // The session's settings before a listener's first statement that changes one, for the session or for
  // the transaction alone (SESSION_SNAPSHOT, read in turn just before it), which the mark sets back after
  // RESET ALL: what the pool's `connect` event set stays. Read before a SET LOCAL too: pg_settings shows a
  // SET LOCAL's value as the session's own, so a snapshot read after it would lose the session's value (the
  // connect event's), and RESET ALL would leave the server's default. Not before a statement that only sets
  // custom variables (`app.tenant`, row-level security's usual `set_config(..., true)`), which costs no
  // query: those it set (`locals`) are left out of a later snapshot, so that theirs does not outlive it.
  let snapshot: Promise<string | undefined> | undefined;
  let snapshotNext = false;
  const locals = new Set<string>();
  const side: PoolSide<PgPoolClient> = {
    name: 'PostgreSQL',
    begin: 'BEGIN',
    prototype: clientPrototype(Reflect.get(pool, 'Client')),
    async take() {
      const taken = (await pool.connect()) as PgPoolClient;
      if (typeof taken?.query !== 'function' || typeof taken.release !== 'function') {
        throw new TypeError('PostgresStore: pool.connect() must resolve a client with query() and release()');
      }
      return taken;
    },
    run: (client, text) => client.query(text),
    inside(args) {
      const mapped = insideTransaction(args, savepoints, key);
      savepoints = mapped.depth;
      setsSession ||= mapped.setsSession;
      if (snapshot === undefined && !snapshotNext) {
        // Read before this statement: what it sets for the transaction alone is not in it yet.
        snapshotNext = mapped.setsSession || mapped.locals.some((name) => !name.includes('.'));
        if (!snapshotNext) for (const name of mapped.locals) locals.add(name);
      }
      return mapped.args;
    },
    send(started, _method, args) {
      const query = (client: PgPoolClient) => client.query.bind(client) as (...a: unknown[]) => unknown;
      if (snapshotNext) {
        snapshotNext = false;
        const read = started.then(async (client) => {
          const { rows } = (await client.query(SESSION_SNAPSHOT)) as { rows?: Array<{ settings?: unknown }> };
          const settings: unknown = rows?.[0]?.settings;
          if (typeof settings !== 'string' || locals.size === 0) return settings as string | undefined;
          const kept = Object.entries(JSON.parse(settings) as Record<string, string>).filter(
            ([name]) => !locals.has(name.toLowerCase()),
          );
          return JSON.stringify(Object.fromEntries(kept));
        });
        snapshot = read;
        return inTurn(
          Promise.all([started, read]).then(([client]) => client),
          query,
          args,
        );
      }
      return inTurn(started, query, args);
    },
    async mark(client, { text, values }) {
      if (!client) return { rows: [], count: (await markWithout()) ? 1 : 0 };
      // Before the mark (a listener's search_path would hide the inbox from it), and in the transaction: the
      // listener's settings go, then what the session had set before them comes back.
      const before = setsSession ? resetSession(await snapshot) : '';
      const andCommit = mark.andCommit(before);
      if (andCommit !== undefined) {
        // One round trip; a lost lease raises LEASE_LOST, which skips the COMMIT: the attempt rolls back.
        return client.query(andCommit).then(
          () => ({ rows: [], count: 1, committed: true }),
          (error: unknown) => {
            const code: unknown = Reflect.get(Object(error), 'code');
            if (code === LEASE_LOST) return { rows: [], count: 0 };
            if (code === INSUFFICIENT_PRIVILEGE && before !== '' && !refusedExecute(error)) {
              // The set-back after RESET ALL, refused: the mark function is not at fault, and stays in use.
              throw new StoreError(
                `PostgresStore: setting back the session's settings after a listener's SET through db was refused (${messageOf(error)}): ` +
                  'the delivery is rolled back and retried. They are set as the session user: a setting your ' +
                  "pool's connect event set that the session user may not set cannot come back",
                { cause: error },
              );
            }
            if (code !== UNDEFINED_FUNCTION && code !== INSUFFICIENT_PRIVILEGE) throw error;
            // Either way the retries send the mark as it was before version 6, which needs no function: a
            // role refused the table itself is refused there too, and reported again.
            mark.functionUnusable?.();
            const retried =
              'the delivery is rolled back and retried with the mark sent as it was before version 6';
            throw new StoreError(
              code === UNDEFINED_FUNCTION
                ? 'PostgresStore: the mark function of schema version 6 is missing (a migration of your own ' +
                    `that stopped at an earlier version?): ${retried}; run store.migrate() (or ` +
                    'postgresMigrations()) to bring it back'
                : `PostgresStore: the mark of schema version 6 was refused (${messageOf(error)}): ${retried}. ` +
                    "A database whose default privileges revoke EXECUTE from PUBLIC: GRANT EXECUTE ON FUNCTION <table>_mark(text, text) to the app's role",
              { cause: error },
            );
          },
        );
      }
      if (before !== '') await client.query(before);
      return { rows: [], count: (await client.query(text, values)).rowCount ?? 0 };
    },
    giveBack: (client) => client.release(),
    destroy: (client) => client.release(true),
  };
  const [text, values] = mark.statement;
  return openPoolTransaction(side, key, { text, values, returns: 'count' }, explainPostgres);
}

/**
 * A listener's query arguments as they run inside a delivery's transaction, `depth` savepoints of its own
 * open (see {@link asSavepoint}): the same arguments, or the mapped statement in their place; the depth
 * after it; whether it changes a setting of the session (see {@link SETS_SESSION}), which {@link RESET} then
 * undoes before the commit; and the settings it sets for the transaction alone (see {@link localNames}).
 * Throws the refusal of a statement that cannot run there.
 */
function insideTransaction(
  args: unknown[],
  depth: number,
  key: string,
): { args: unknown[]; depth: number; setsSession: boolean; locals: string[] } {
  const text = textOf(args[0]);
  const statements = text === undefined ? [] : settingStatements(text);
  const setsSession = statements.some((each) => SETS_SESSION.test(each) && !onlyLocalConfig(each));
  const locals = statements.flatMap(localNames);
  const mapped = asSavepoint(text, depth, key);
  if (mapped === undefined) return { args, depth, setsSession, locals };
  // Refused before the depth changes: a savepoint that is never sent must not be released later.
  if (typeof Reflect.get(Object(args[0]), 'submit') === 'function') throw submittableRefusal(key);
  const first = typeof args[0] === 'string' ? mapped.text : { ...(args[0] as object), text: mapped.text };
  return { args: [first, ...args.slice(1)], depth: mapped.depth, setsSession, locals };
}

/**
 * A statement that changes a setting of the session, which outlives the transaction when it commits:
 * `SET name ...` or `SET SESSION ...` (`SET SESSION CHARACTERISTICS` too: the defaults of the session's next
 * transactions; not `SET TRANSACTION`, `SET CONSTRAINTS`, nor `SET LOCAL` but of `search_path` (quoted or not), which is still in
 * force at the mark and would hide the inbox table and its mark function from it), `RESET`,
 * `set_config(...)` (whose third argument may say `false`; not when each of its calls says `true`, for a
 * setting named as a literal other than `search_path`: see {@link onlyLocalConfig}). Cheap to tell, so that
 * only a delivery that made one pays for its {@link RESET}.
 */
const SETS_SESSION =
  /^\s*(?:set\s+(?!local\b|transaction\b|constraints\b)|set\s+local\s+(?:search_path\b|"search_path"|schema\b)|reset\b)|\bset_config"?\s*\(/i;

/** A call of `set_config`. */
const SET_CONFIG = /\bset_config"?\s*\(/gi;
/** A call of `set_config` for the transaction alone, of a setting named as a literal (captured). */
const LOCAL_SET_CONFIG =
  /\bset_config"?\s*\(\s*'((?:[^']|'')*)'\s*,\s*(?:'(?:[^']|'')*'|\$\d+|[^,()']*)\s*,\s*true\s*\)/gi;

/**
 * Whether `statement` is a `SELECT set_config(...)` whose every call sets a setting named as a literal,
 * other than `search_path`, for the transaction alone (`set_config('app.tenant_id', $1, true)`, the usual
 * row-level security setup): it ends with the transaction and hides nothing from the mark, so it needs no
 * {@link RESET}.
 */
function onlyLocalConfig(statement: string): boolean {
  if (!/^\s*select\b/i.test(statement)) return false;
  const calls = statement.match(SET_CONFIG)?.length ?? 0;
  const locals = [...statement.matchAll(LOCAL_SET_CONFIG)];
  return (
    calls > 0 && locals.length === calls && locals.every(([, name]) => name!.toLowerCase() !== 'search_path')
  );
}

/** `SET LOCAL name`, the name captured (`TIME ZONE`, `ROLE`, `SESSION AUTHORIZATION` as their settings). */
const SET_LOCAL = /^\s*set\s+local\s+("[^"]+"|time\s+zone\b|session\s+authorization\b|[\w.$]+)/i;

/**
 * The settings `statement` sets for the transaction alone (`SET LOCAL`, {@link onlyLocalConfig}'s
 * `set_config`), lower-cased as `pg_settings` names them (but for case).
 */
function localNames(statement: string): string[] {
  const local = SET_LOCAL.exec(statement)?.[1];
  if (local !== undefined) {
    const name = local.replace(/^"|"$/g, '').toLowerCase().replace(/\s+/g, ' ');
    return [
      name === 'time zone' ? 'timezone' : name === 'session authorization' ? 'session_authorization' : name,
    ];
  }
  if (!onlyLocalConfig(statement)) return [];
  return [...statement.matchAll(LOCAL_SET_CONFIG)].map(([, name]) =>
    name!.replaceAll("''", "'").toLowerCase(),
  );
}

/**
 * The statements of `text` that {@link SETS_SESSION} and {@link localNames} read, read as
 * PostgreSQL reads it (see {@link splitStatements}, both ways a string literal can be read): a comment
 * before the `SET` (an ORM's trace comment) or a quoted `"set_config"` must not let a setting outlive the
 * delivery on the pooled client, nor the mark run under it (a `search_path`).
 */
function settingStatements(text: string): string[] {
  if (!/set/i.test(text)) return []; // cheap: most statements name none
  return [...splitStatements(text), ...splitStatements(text, true)];
}

/** What `db` is an object of before its first query: the pool's client class's (`db instanceof Client`). */
function clientPrototype(Client: unknown): object | null {
  return typeof Client === 'function' ? (Client.prototype as object | null) : Object.prototype;
}

/** PostgreSQL's in_failed_sql_transaction: a statement of the transaction failed before. */
const IN_FAILED_TRANSACTION = '25P02';

/**
 * What a PostgreSQL error means to a partner, when it says more than its message: a transaction aborted by
 * a statement of a listener that caught its own SQL error. Looks through `cause`s, as ORMs wrap the
 * driver's error. `undefined` for any other.
 */
export function explainPostgres(error: unknown): string | undefined {
  let current: unknown = error;
  for (let depth = 0; depth < 5 && typeof current === 'object' && current !== null; depth += 1) {
    if (Reflect.get(current, 'code') === IN_FAILED_TRANSACTION) {
      return (
        'a query a listener made in the transaction failed, and PostgreSQL aborted the transaction (a ' +
        'listener that catches a SQL error cannot go on in it: let the error throw, or wrap the query in a ' +
        'SAVEPOINT, as your ORM does for a nested transaction)'
      );
    }
    current = Reflect.get(current, 'cause');
  }
  return undefined;
}

/** The text of a query's first argument: a string, or a config's (or submittable's) `text`. */
function textOf(first: unknown): string | undefined {
  if (typeof first === 'string') return first;
  const text: unknown = typeof first === 'object' && first !== null ? Reflect.get(first, 'text') : undefined;
  return typeof text === 'string' ? text : undefined;
}

const BEGIN = /^\s*(?:begin|start\s+transaction)(?:\s+(?:work|transaction))?\s*;?\s*$/i;
const COMMIT = /^\s*(?:commit|end)(?:\s+(?:work|transaction))?\s*;?\s*$/i;
const ROLLBACK = /^\s*(?:rollback|abort)(?:\s+(?:work|transaction))?\s*;?\s*$/i;
/**
 * A statement that starts, ends or prepares a transaction, in any form (with options, chained, prepared);
 * not `ROLLBACK TO SAVEPOINT`, which ends no transaction (an ORM's nested transaction sends it).
 */
const CONTROL =
  /^\s*(?:begin|start\s+transaction|commit|end|rollback(?!\s+(?:(?:work|transaction)\s+)?to\b)|abort|prepare\s+transaction)\b/i;

/**
 * A listener's transaction statement as it runs inside the delivery's transaction: `BEGIN` becomes a
 * savepoint, `COMMIT` releases it, `ROLLBACK` rolls back to it (`depth`: how many are open, before and
 * after). `undefined` for any other statement, which runs as it is; a `refusal` (thrown) for a transaction
 * statement that would end the delivery's transaction or cannot be mapped. The text is read as PostgreSQL
 * reads it (see {@link splitStatements}): a comment before a `COMMIT`, or a quote that hides a `;` from a
 * careless reading, must not let it run as it is, since it would commit the listeners' writes early.
 */
export function asSavepoint(
  text: string | undefined,
  depth: number,
  key: string,
): { text: string; depth: number } | undefined {
  if (text === undefined) return undefined;
  const name = (level: number): string => `ipn_kit_${level}`;
  const standard = splitStatements(text);
  // A single statement, comments left out (an ORM's trace comment on its BEGIN or COMMIT).
  const only = standard.length === 1 ? standard[0]! : '';
  if (BEGIN.test(only)) return { text: `SAVEPOINT ${name(depth)}`, depth: depth + 1 };
  if (COMMIT.test(only) && depth > 0)
    return { text: `RELEASE SAVEPOINT ${name(depth - 1)}`, depth: depth - 1 };
  if (ROLLBACK.test(only) && depth > 0) {
    return { text: `ROLLBACK TO SAVEPOINT ${name(depth - 1)}`, depth: depth - 1 };
  }
  // Read both ways a string literal can be read (standard_conforming_strings on, and off: a listener may
  // turn it off): a transaction statement found either way is refused.
  const statements = [...standard, ...splitStatements(text, true)];
  const control = statements.find((statement) => CONTROL.test(statement));
  if (control === undefined) return undefined;
  const what = control.trim().split(/\s+/).slice(0, 3).join(' ');
  throw new DeliveryError(
    `a listener sent "${what}" through db, inside the delivery transaction of ${key}: ipn-kit begins and ` +
      'commits that transaction itself, so that your writes and the delivered mark land together. A plain ' +
      "BEGIN, COMMIT or ROLLBACK (your ORM's transaction helper on db) runs as a savepoint; this one cannot " +
      '(a COMMIT or ROLLBACK with no BEGIN before it, transaction options, several statements, PREPARE ' +
      "TRANSACTION). Write through db without it, or give the store your ORM's transactions (ipn-kit/orm) " +
      'and write through tx',
  );
}

/** A refusal for a transaction statement sent as a submittable (a `pg` `Query` object). */
function submittableRefusal(key: string): DeliveryError {
  return new DeliveryError(
    `a listener sent a transaction statement as a submittable query through db (delivery transaction of ${key}): send it as text`,
  );
}

/**
 * Where a token of PostgreSQL's lexer that can hold a `;` (or that a `$` must not be read in) ends, for the
 * token starting at `at`: a string literal (standard, `E''` with backslash escapes; with `backslashes`, a
 * standard one read as `standard_conforming_strings = off` reads it), a quoted identifier, a dollar quote, a
 * parameter (`$1`), an identifier (read whole, so that the `$b$` of `a$b$` starts no dollar quote).
 * `undefined` for any other character. An unterminated one runs to the end: PostgreSQL refuses the whole
 * text then, running none of it.
 */
function tokenEnd(text: string, at: number, backslashes: boolean): number | undefined {
  const sticky = (pattern: RegExp): number | undefined => {
    pattern.lastIndex = at;
    return pattern.exec(text) === null ? undefined : pattern.lastIndex;
  };
  const escaped = sticky(/[eE]'(?:[^'\\]|\\[\s\S]|'')*(?:'|$)/y);
  if (escaped !== undefined) return escaped;
  if (text[at] === "'")
    return sticky(backslashes ? /'(?:[^'\\]|\\[\s\S]|'')*(?:'|$)/y : /'(?:[^']|'')*(?:'|$)/y);
  if (text[at] === '"') return sticky(/"(?:[^"]|"")*(?:"|$)/y);
  if (text[at] === '$') {
    const tag = /\$(?:[A-Za-z_\u0080-\uffff][A-Za-z0-9_\u0080-\uffff]*)?\$/y;
    tag.lastIndex = at;
    const opened = tag.exec(text);
    if (opened === null) return sticky(/\$[0-9]*/y);
    const closing = text.indexOf(opened[0], tag.lastIndex);
    return closing === -1 ? text.length : closing + opened[0].length;
  }
  return sticky(/[A-Za-z_\u0080-\uffff][A-Za-z0-9_$\u0080-\uffff]*/y);
}

/**
 * Where the comment starting at `at` ends (`--` to the end of the line, or a block comment, nested as
 * PostgreSQL nests them); `undefined` when none starts there.
 */
function commentEnd(text: string, at: number): number | undefined {
  if (text.startsWith('--', at)) {
    const line = text.slice(at).search(/[\r\n]/);
    return line === -1 ? text.length : at + line;
  }
  if (!text.startsWith('/*', at)) return undefined;
  let depth = 0;
  for (let i = at; i < text.length;) {
    if (text.startsWith('/*', i)) {
      depth += 1;
      i += 2;
    } else if (text.startsWith('*/', i)) {
      depth -= 1;
      i += 2;
      if (depth === 0) return i;
    } else {
      i += 1;
    }
  }
  return text.length;
}

/** What {@link splitStatements} must scan for: a `;`, or the start of a comment (`--`, `/*`). */
const MAY_SPLIT = /;|--|\/\*/;

/**
 * The statements of a SQL text as PostgreSQL reads them, each with its comments left out (a space in their
 * place): split on the semicolons outside string literals, quoted identifiers, dollar quotes and comments.
 * So a `COMMIT` hidden after another statement, or behind a comment, is found, and one inside a string
 * literal is not. `backslashes`: read standard string literals as `standard_conforming_strings = off` does.
 */
export function splitStatements(text: string, backslashes = false): string[] {
  // A text with no `;` and no comment opener anywhere is one statement, itself, however it is read: the
  // scan below would copy it whole. Every query a listener sends through `db` is read here (twice), and
  // most are one plain statement: the scan, a few regular expressions per token, is then skipped.
  if (!MAY_SPLIT.test(text)) return text.trim() === '' ? [] : [text];
  const statements: string[] = [];
  let current = '';
  for (let i = 0; i < text.length;) {
    const comment = commentEnd(text, i);
    if (comment !== undefined) {
      current += ' ';
      i = comment;
      continue;
    }
    const end = tokenEnd(text, i, backslashes);
    if (end !== undefined && end > i) {
      current += text.slice(i, end);
      i = end;
    } else if (text[i] === ';') {
      statements.push(current);
      current = '';
      i += 1;
    } else {
      current += text[i];
      i += 1;
    }
  }
  statements.push(current);
  return statements.filter((statement) => statement.trim() !== '');
}

/**
 * Runs a query on the client `started` resolves (once BEGIN has answered and the previous query of the
 * transaction has settled: the listeners run concurrently, and pg wants one query at a time on a client),
 * or refuses it with the error `started` rejects with. `result` has the shape pg gives for the way it was
 * called: a promise (marked handled when refused, so that a query nobody awaits never crashes the process);
 * `undefined` for the callback forms (`query(text, values, callback)` or a config with a `callback`), the
 * callback getting the refusal; the submittable itself (a cursor, a stream), told through `handleError`.
 * `done` settles when the query has.
 */
function inTurn<C>(
  started: Promise<C>,
  queryOf: ((client: C) => (...args: unknown[]) => unknown) | undefined,
  args: unknown[],
): { result: unknown; done: Promise<unknown> } {
  const run = (client: C, runArgs: unknown[]): unknown => Reflect.apply(queryOf!(client), undefined, runArgs);
  const first = Object(args[0]) as { submit?: unknown; handleError?: unknown; callback?: unknown };
  const last = args[args.length - 1];
  if (typeof first.submit === 'function') {
    // pg queues a submittable behind it: the next query waits for none of it but its sending.
    const done = started.then(
      (client) => run(client, args),
      (error: unknown) => {
        if (typeof first.handleError === 'function') Reflect.apply(first.handleError, first, [error]);
      },
    );
    return { result: first, done };
  }
  const callback = typeof last === 'function' ? last : first.callback;
  if (typeof callback === 'function') {
    const done = started.then(
      (client) =>
        new Promise<void>((resolve) => {
          const answered = (...answer: unknown[]): void => {
            resolve();
            Reflect.apply(callback, undefined, answer);
          };
          run(
            client,
            typeof last === 'function'
              ? [...args.slice(0, -1), answered]
              : [{ ...first, callback: answered }],
          );
        }),
      (error: unknown) => void Reflect.apply(callback, undefined, [error]),
    );
    return { result: undefined, done };
  }
  const result = started.then((client) => run(client, args));
  result.catch(() => {}); // handled here; whoever awaits it still gets the rejection
  return { result, done: result.catch(() => {}) };
}
