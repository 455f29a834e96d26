import { randomBytes } from 'node:crypto';
import { LEASE_LOST, RESET } from './postgres-sql.js';
import { DeliveryError, messageOf, StoreError } from '../../shared/errors.js';
import type { DeliveryTransaction } from '../store.js';
import {
  asCommitFailure,
  asOpenFailure,
  insideTransaction,
  inTurn,
  standIn,
  type Listening,
  type PgPoolClient,
} from './postgres-transaction.js';

/**
 * How a member of a group marks its entry delivered: `statement` (changing one row while the lease holds,
 * none once it was lost), or the one statement `orRaise()` gives, which fails with {@link LEASE_LOST} when
 * the lease was lost (`undefined` when the key cannot stand in it).
 */
export interface GroupMark {
  statement: [string, unknown[]];
  orRaise(): string | undefined;
}

/** The limits of group transactions (see `PostgresStoreOptions.groupDeliveries`). */
export interface GroupLimits {
  /** Deliveries in one group transaction at most. */
  size: number;
  /** Group transactions taking members at once (each holds one client of the pool). */
  lanes: number;
  /**
   * How long a group waits for its current member once another is marked (their commit waits for it): past
   * it, the group stops taking members, and a member still in its turn is evicted (its attempt runs again
   * alone) so that the others commit. Also how long a turn may last before its lane no longer counts
   * against `lanes`, and how long a statement of the group's own may go unanswered before the group is given
   * up.
   */
  holdMs(): number;
}

/**
 * The name of the savepoint each member's writes and mark run in: `ipn_kit_group_` and a suffix no listener
 * can know. A listener that named it through `db` could otherwise hide it behind a savepoint of its own (its
 * failure would then roll back to that one, and what it wrote before would land, with no mark, to be
 * written again on its retry), release it (its writes taken out of its savepoint), or roll back to it (its
 * credit undone, then marked delivered). A name it does not know fails its statement instead.
 */
const savepointName = (): string => `ipn_kit_group_${randomBytes(6).toString('hex')}`;

type MemberState = 'idle' | 'waiting' | 'turn' | 'committing' | 'marked' | 'ended';

interface Deferred<T> {
  promise: Promise<T>;
  resolve(value: T): void;
  reject(error: unknown): void;
}

function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((yes, no) => {
    resolve = yes;
    reject = no;
  });
  promise.catch(() => {}); // whoever awaits it gets the rejection; nobody may, and that is no crash
  return { promise, resolve, reject };
}

interface Member {
  readonly key: string;
  state: MemberState;
  lane?: Lane;
  /** Resolves once this member has the turn on an open lane (its savepoint is set), or the failure. */
  granted?: Promise<{ error: unknown } | undefined>;
  grant?: Deferred<Lane>;
  /** Settles when the last query the listeners made has. */
  queue: Promise<unknown>;
  /** Queries sent on the lane's client and not settled yet. */
  inFlight: number;
  /** BEGINs the listeners sent through db, open as savepoints inside the member's. */
  depth: number;
  /** A listener changed a setting of the session through db: RESET ALL goes with the member's mark. */
  setsSession?: boolean;
  /** The group's COMMIT, for a member marked in it. */
  outcome?: Deferred<'delivered'>;
  /** Given up by its group through no fault of its own: nothing of it landed unless the entry says so. */
  alone: boolean;
  /** Its mark has been sent: it can no longer be evicted. */
  marking: boolean;
}

interface Lane {
  client?: PgPoolClient;
  /**
   * The server process of its transaction (`pg_backend_pid()`, read in it): not the client's `processID`,
   * which behind a pooler (PgBouncer, Supabase, Neon) is the pooler's cancel key, not a backend.
   */
  pid?: number;
  opened: Promise<void>;
  state: 'opening' | 'open' | 'finishing' | 'ended';
  holder?: Member;
  /** When the holder got its turn (monotonic ms). */
  turnSince: number;
  /** Members that had a turn. */
  taken: number;
  marked: Member[];
  /** When the first member was marked: from then on, marked members wait for the group's COMMIT. */
  firstMarkAt?: number;
  /** No more turns: the group commits once its holder's ends. */
  closing: boolean;
  broken?: unknown;
  timer?: ReturnType<typeof setTimeout>;
  onError: (error: unknown) => void;
}

const now = (): number => performance.now();

/** PostgreSQL's active_sql_transaction: a statement that must come first in a transaction of its own. */
const ACTIVE_SQL_TRANSACTION = '25001';

/** The SQLSTATE of an error PostgreSQL answered (five characters), or `undefined` (the connection failed). */
function sqlState(error: unknown): string | undefined {
  const code: unknown = Reflect.get(Object(error), 'code');
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

/**
 * Group transactions of delivery attempts over `pool` (see `PostgresStoreOptions.groupDeliveries`): the
 * attempts whose listeners query `db` while others do share one transaction on one client, a lane, and its
 * one COMMIT. Each member takes its turn on the lane from its listeners' first query to its commit or
 * rollback, inside a savepoint (`ipn_kit_group_` and a random suffix): its writes, then its lease-guarded
 * mark, then the savepoint is released and set again for the next member, in one simple query. A member
 * whose listeners fail (or whose lease was lost) rolls back to the savepoint; the others go on. The last
 * member's mark goes with the COMMIT. Members wait for a turn in one queue, served by whichever lane frees
 * up first: nothing waits to join a group; a group is whatever was due while its lane was busy.
 *
 * What a member's `commit()` resolves is never assumed: a COMMIT that fails with an answer from PostgreSQL
 * rolled back (its members are `retryAlone`); one whose answer is lost rejects for each member, which
 * delivery settles by reading the entry. A lane whose transaction breaks (its connection lost, a statement
 * of the group's own failing or not answering within `holdMs`, a member abandoned with a query still
 * running) is closed, which rolls it back, and its members are `retryAlone`: delivery runs them again at
 * once, each in a transaction of its own.
 */
export function createGroups(pool: { connect(): Promise<unknown> }, limits: GroupLimits) {
  const SAVEPOINT = savepointName();
  const waiting: Member[] = [];
  const lanes = new Set<Lane>();
  let pumpTimer: ReturnType<typeof setTimeout> | undefined;

  /** Lanes that count against `lanes`: opening or open, their turn not stalled past `holdMs`. */
  const counted = (): number => {
    const stalled = now() - limits.holdMs();
    let count = 0;
    for (const lane of lanes) {
      if (lane.state !== 'opening' && lane.state !== 'open') continue;
      if (lane.holder !== undefined && lane.turnSince < stalled) continue;
      count += 1;
    }
    return count;
  };

  const canTake = (lane: Lane): boolean =>
    lane.state === 'open' &&
    !lane.closing &&
    lane.taken < limits.size &&
    (lane.firstMarkAt === undefined || now() - lane.firstMarkAt < limits.holdMs() / 2);

  function grant(lane: Lane, member: Member): void {
    lane.holder = member;
    lane.turnSince = now();
    lane.taken += 1;
    member.lane = lane;
    member.state = 'turn';
    lane.opened.then(
      () => member.grant!.resolve(lane),
      (error: unknown) => member.grant!.reject(error),
    );
  }

  /** Gives waiting members a lane: new ones while fewer than `lanes` count. */
  function pump(): void {
    while (waiting.length > 0 && counted() < limits.lanes) {
      const next = waiting.shift()!;
      if (next.state === 'waiting') grant(openLane(), next);
    }
    if (waiting.length > 0 && pumpTimer === undefined) {
      // A lane whose turn stalls stops counting after holdMs: look again then.
      pumpTimer = setTimeout(() => {
        pumpTimer = undefined;
        pump();
      }, limits.holdMs());
      pumpTimer.unref?.();
    }
  }

  function request(member: Member): void {
    member.grant = deferred<Lane>();
    for (const lane of lanes) {
      if (lane.holder === undefined && canTake(lane)) {
        grant(lane, member);
        return;
      }
    }
    member.state = 'waiting';
    waiting.push(member);
    pump();
  }

  function openLane(): Lane {
    const lane: Lane = {
      state: 'opening',
      turnSince: now(),
      taken: 0,
      marked: [],
      closing: false,
      opened: Promise.resolve(),
      onError: (error) => {
        lane.broken ??= error;
      },
    };
    lanes.add(lane);
    lane.opened = (async () => {
      const taken = (await pool.connect()) as PgPoolClient;
      if (typeof taken?.query !== 'function' || typeof taken.release !== 'function') {
        throw new TypeError('PostgresStore: pool.connect() must resolve a client with query() and release()');
      }
      if (lane.state !== 'opening') {
        taken.release();
        throw new DeliveryError('the group transaction ended before it opened');
      }
      lane.client = taken;
      (Reflect.get(taken, 'on') as Listening | undefined)?.call(taken, 'error', lane.onError);
      const begun: unknown = await own(lane, `BEGIN; SAVEPOINT ${SAVEPOINT}; SELECT pg_backend_pid() AS pid`);
      lane.pid = lastPid(begun);
      if (lane.state === 'opening') lane.state = 'open';
    })();
    lane.opened.catch((error: unknown) => breakLane(lane, error));
    return lane;
  }

  /**
   * A statement still running on a lane given up keeps running in PostgreSQL once its socket is closed (it
   * notices only when it answers), holding the row locks of the group's marks, which the members' runs alone
   * then wait for: its backend (`pid`, read in its transaction) is ended through another connection of the
   * pool (best effort: a role that may not end it leaves the statement to finish).
   */
  function stopBackend(pid: number | undefined): void {
    const query: unknown = Reflect.get(pool, 'query');
    if (typeof pid !== 'number' || typeof query !== 'function') return;
    const ended = Reflect.apply(query, pool, ['SELECT pg_terminate_backend($1)', [pid]]) as unknown;
    if (ended instanceof Promise) ended.catch(() => {});
  }

  /**
   * Sends one of the group's own statements on the lane's client. One that has not answered within `holdMs`
   * (sent into a network gone silent, waiting for a lock) breaks the lane: its connection is closed, which
   * fails the statement, and its backend ended. Otherwise the group would hold its client, and the row locks
   * of the marks made in it (which keep those entries from being leased again), for as long as it waits.
   */
  function own(lane: Lane, text: string, values?: unknown[]): Promise<{ rowCount: number | null }> {
    const stalled = setTimeout(() => {
      const error = new StoreError(
        `a statement of the group transaction did not answer within ${limits.holdMs()} ms: its connection is closed`,
      );
      breakLane(lane, error, true);
    }, limits.holdMs());
    stalled.unref?.();
    const answered = lane.client!.query(text, values);
    answered.then(
      () => clearTimeout(stalled),
      () => clearTimeout(stalled),
    );
    return answered;
  }

  /** Ends the lane: gives its client back, or closes it (which rolls back whatever is open). */
  function endLane(lane: Lane, destroy: boolean): void {
    lane.state = 'ended';
    if (lane.timer !== undefined) clearTimeout(lane.timer);
    lanes.delete(lane);
    const held = lane.client;
    lane.client = undefined;
    if (held !== undefined) {
      (Reflect.get(held, 'removeListener') as Listening | undefined)?.call(held, 'error', lane.onError);
      held.release(destroy || lane.broken !== undefined || undefined);
    }
    pump();
  }

  /**
   * The lane's transaction broke before its COMMIT was sent: its connection is closed (PostgreSQL rolls it
   * back), and every member still in it is given up, to run again alone.
   */
  function breakLane(lane: Lane, cause: unknown, running = false): void {
    if (lane.state === 'ended') return;
    lane.broken ??= cause;
    if (running) stopBackend(lane.pid);
    const marked = lane.marked.splice(0);
    const holder = lane.holder;
    lane.holder = undefined;
    endLane(lane, true);
    const error = new StoreError(
      `the group transaction of ${marked.length + (holder ? 1 : 0)} deliveries broke before its commit, ` +
        `and was rolled back: ${messageOf(cause)} (each runs again in a transaction of its own)`,
      { cause },
    );
    if (holder !== undefined && holder.state !== 'ended') holder.alone = true;
    for (const member of marked) {
      member.alone = true;
      member.state = 'ended';
      member.outcome!.reject(error);
    }
  }

  /** The holder's turn is over: the next waiting member takes it, or the group commits. */
  function passTurn(lane: Lane): void {
    lane.holder = undefined;
    if (lane.state !== 'open') return;
    while (waiting.length > 0 && canTake(lane)) {
      const next = waiting.shift()!;
      if (next.state !== 'waiting') continue;
      grant(lane, next);
      return;
    }
    void finishLane(lane);
  }

  /** Commits the lane's marked members (or rolls back when there are none), and ends it. */
  async function finishLane(lane: Lane): Promise<void> {
    lane.state = 'finishing';
    pump();
    const marked = lane.marked.splice(0);
    if (marked.length === 0) {
      const rolled = await own(lane, 'ROLLBACK').then(
        () => true,
        () => false,
      );
      endLane(lane, !rolled);
      return;
    }
    try {
      await own(lane, 'COMMIT');
    } catch (cause) {
      settleUnknown(lane, marked, cause);
      return;
    }
    endLane(lane, false);
    for (const member of marked) {
      member.state = 'ended';
      member.outcome!.resolve('delivered');
    }
  }

  /**
   * The COMMIT failed. With PostgreSQL's answer (a SQLSTATE), it rolled back; without (the connection
   * failed), nobody knows: each member rejects, and delivery reads its entry. Either way each may run again
   * alone, once its entry says it was not delivered.
   */
  function settleUnknown(lane: Lane, marked: Member[], cause: unknown): void {
    endLane(lane, true);
    for (const member of marked) {
      member.alone = true;
      member.state = 'ended';
      member.outcome!.reject(asCommitFailure(member.key, cause));
    }
  }

  /** The holder's writes are undone: rolled back to its savepoint; the lane goes on. False when it broke. */
  async function undoTurn(lane: Lane): Promise<boolean> {
    try {
      await own(lane, `ROLLBACK TO SAVEPOINT ${SAVEPOINT}`);
      return true;
    } catch (error) {
      breakLane(lane, error);
      return false;
    }
  }

  /**
   * Once a member is marked, it waits for the group's COMMIT: a holder still in its turn after `holdMs` is
   * evicted (it runs again alone), so that a slow listener never holds the others past it.
   */
  function watch(lane: Lane): void {
    if (lane.firstMarkAt !== undefined) return;
    lane.firstMarkAt = now();
    lane.timer = setTimeout(() => {
      lane.closing = true;
      const holder = lane.holder;
      if (lane.state !== 'open' || holder === undefined || holder.marking) return;
      if (holder.state === 'ended') {
        // Rolling back, behind a query of its own that has not answered: the group cannot wait for it.
        if (holder.inFlight > 0)
          breakLane(lane, new DeliveryError(`a query of ${holder.key} held its group`), true);
        return;
      }
      if (holder.state !== 'turn' && holder.state !== 'committing') return;
      holder.alone = true;
      holder.state = 'ended'; // every query from now on is refused
      if (holder.inFlight > 0) {
        breakLane(
          lane,
          new DeliveryError(`the delivery of ${holder.key} held its group past ${limits.holdMs()} ms`),
          true,
        );
        return;
      }
      void undoTurn(lane).then((undone) => {
        if (undone) passTurn(lane);
      });
    }, limits.holdMs());
    lane.timer.unref?.();
  }

  /** Marks the holder delivered inside its savepoint; its turn passes, or the group commits with it. */
  async function mark(lane: Lane, member: Member, how: GroupMark): Promise<'delivered' | 'lost'> {
    member.marking = true;
    const last = !(waiting.some((next) => next.state === 'waiting') && canTake(lane));
    const raise = how.orRaise();
    const reset = member.setsSession === true ? `${RESET}; ` : ''; // it ends with the member's savepoint
    let lost = false;
    try {
      if (raise !== undefined) {
        if (last) lane.state = 'finishing';
        await own(
          lane,
          `${reset}${raise}; ${last ? 'COMMIT' : `RELEASE SAVEPOINT ${SAVEPOINT}; SAVEPOINT ${SAVEPOINT}`}`,
        );
      } else {
        if (reset !== '') await own(lane, RESET);
        const { rowCount } = await own(lane, ...how.statement);
        lost = rowCount !== 1;
        if (!lost) {
          if (last) lane.state = 'finishing';
          await own(lane, `${last ? 'COMMIT' : `RELEASE SAVEPOINT ${SAVEPOINT}; SAVEPOINT ${SAVEPOINT}`}`);
        }
      }
    } catch (error) {
      const code = sqlState(error);
      if (code === undefined || lane.broken !== undefined) {
        // The connection failed: whether the COMMIT (when sent) landed is unknown, for every member.
        member.state = 'ended';
        member.alone = true;
        settleUnknown(lane, lane.marked.splice(0), error);
        throw asCommitFailure(member.key, error);
      }
      // PostgreSQL refused a statement: whatever came after it in the query (the COMMIT) did not run.
      if (lane.state === 'finishing') lane.state = 'open';
      member.state = 'ended';
      if (!(await undoTurn(lane))) {
        // Not even the savepoint is left: the COMMIT itself failed (a deferred constraint, a serialization
        // failure) or the connection with it; the whole group rolled back, this member with it.
        member.alone = true;
        throw asCommitFailure(member.key, error);
      }
      passTurn(lane);
      if (code === LEASE_LOST) return 'lost';
      throw asCommitFailure(member.key, error);
    }
    if (lost) {
      member.state = 'ended';
      if (await undoTurn(lane)) passTurn(lane);
      return 'lost';
    }
    if (last) {
      // The group committed with this member's mark.
      const marked = lane.marked.splice(0);
      endLane(lane, false);
      member.state = 'ended';
      for (const other of marked) {
        other.state = 'ended';
        other.outcome!.resolve('delivered');
      }
      return 'delivered';
    }
    member.state = 'marked';
    member.outcome = deferred();
    lane.marked.push(member);
    watch(lane);
    const outcome = member.outcome.promise;
    passTurn(lane);
    return outcome;
  }

  /**
   * The transaction of one delivery attempt at `key`, as a member of a group: nothing happens until its
   * listeners' first query through `db`, which waits for a turn on a lane. `markWithout` marks an attempt
   * whose listeners never queried `db` (the store's batched settlement).
   */
  function join(
    key: string,
    how: GroupMark,
    markWithout: () => Promise<boolean>,
    Client: unknown,
  ): DeliveryTransaction<unknown, unknown> & { readonly retryAlone: boolean } {
    const member: Member = {
      key,
      state: 'idle',
      queue: Promise.resolve(),
      inFlight: 0,
      depth: 0,
      alone: false,
      marking: false,
    };
    const refused = (): DeliveryError =>
      new DeliveryError(
        `the delivery transaction of ${key} has ended (a listener failed, or ran past leaseMs, or its group ` +
          'moved on without it): this write was not made; it is made again with the next attempt, in its own ' +
          'transaction',
      );
    // A query made before the commit may still be waiting for the one before it: it runs while committing.
    const gone = (): boolean =>
      (member.state !== 'turn' && member.state !== 'committing') || member.lane?.broken !== undefined;
    /** A listener's statement as it runs inside the member's savepoint (see `asSavepoint`). */
    const inside = (args: unknown[]): unknown[] => {
      const mapped = insideTransaction(args, member.depth, key);
      member.depth = mapped.depth;
      if (mapped.setsSession) member.setsSession = true;
      return mapped.args;
    };
    /** Sends a query on the lane's client, unless the turn ended meanwhile (then refused, in its form). */
    const send =
      (client: PgPoolClient, sent: { yes: boolean }) =>
      (...args: unknown[]): unknown => {
        if (gone()) {
          const last = args[args.length - 1];
          const first = Object(args[0]) as { submit?: unknown; handleError?: unknown; callback?: unknown };
          if (typeof first.submit === 'function') {
            if (typeof first.handleError === 'function') Reflect.apply(first.handleError, first, [refused()]);
            return first;
          }
          const callback = typeof last === 'function' ? last : first.callback;
          if (typeof callback === 'function') {
            Reflect.apply(callback, undefined, [refused()]);
            return undefined;
          }
          return Promise.reject(refused());
        }
        sent.yes = true;
        member.inFlight += 1;
        const answer = (client.query as (...a: unknown[]) => unknown)(...args);
        if (answer instanceof Promise) {
          // What only a transaction of its own may do (SET TRANSACTION ISOLATION LEVEL, which PostgreSQL
          // refuses in a savepoint): the attempt, failed by it, runs again at once alone, where it may.
          answer.catch((error: unknown) => {
            if (sqlState(error) === ACTIVE_SQL_TRANSACTION) member.alone = true;
          });
        }
        return answer;
      };
    const db = new Proxy(standIn(Client), {
      get(target, property) {
        if (property === 'release') return () => {};
        if (property === 'query') {
          return (...args: unknown[]) => {
            if (member.state === 'committing' || member.state === 'marked' || member.state === 'ended') {
              return inTurn(Promise.reject(refused()), undefined, args).result;
            }
            if (member.state === 'idle') {
              request(member);
              member.granted = member.grant!.promise.then(
                () => undefined,
                (error: unknown) => ({ error: asOpenFailure(key, error) }),
              );
            }
            let run = args;
            try {
              run = inside(args);
            } catch (refusal) {
              return inTurn(Promise.reject(refusal as Error), undefined, args).result;
            }
            const started = Promise.all([member.granted, member.queue]).then(([failed]) => {
              if (failed) throw failed.error;
              if (gone()) throw refused();
              return member.lane!.client!;
            });
            const sent = { yes: false };
            const { result, done } = inTurn(started, (client) => send(client, sent), run);
            member.queue = done.then(() => {
              if (sent.yes) member.inFlight -= 1;
            });
            return result;
          };
        }
        const holder = member.state === 'turn' ? (member.lane?.client ?? target) : target;
        const value: unknown = Reflect.get(holder, property, holder);
        return typeof value === 'function' ? (value as () => unknown).bind(holder) : value;
      },
    }) as unknown;
    return {
      tx: db,
      db,
      get retryAlone() {
        return member.alone;
      },
      get state() {
        return member.state === 'idle' || member.state === 'ended' ? member.state : 'open';
      },
      async commit() {
        if (member.state === 'committing' || member.state === 'marked' || member.state === 'ended') {
          throw refused();
        }
        if (member.state === 'idle') {
          member.state = 'ended';
          return (await markWithout()) ? 'delivered' : 'lost';
        }
        member.state = member.state === 'waiting' ? 'waiting' : 'committing';
        const failed = await member.granted;
        if (failed) {
          member.state = 'ended';
          throw failed.error;
        }
        // Granted meanwhile (the listeners' queries were still waiting for a turn): now committing.
        if ((member.state as MemberState) === 'turn') member.state = 'committing';
        await member.queue; // every query a listener made, awaited or not, lands before the mark
        const lane = member.lane!;
        if (member.state !== 'committing') throw refused(); // evicted or abandoned meanwhile
        if (lane.broken !== undefined || lane.state !== 'open') {
          member.state = 'ended';
          member.alone = true;
          throw new StoreError(
            `the connection of the group transaction of ${key} failed: ${messageOf(lane.broken)}`,
            { cause: lane.broken },
          );
        }
        return mark(lane, member, how);
      },
      async rollback(listeners) {
        switch (member.state) {
          case 'ended':
          case 'marked': // the group's COMMIT decides, and the entry says what it did
            return;
          case 'committing': {
            // A commit under way ends the turn itself, unless it was given up (it timed out) while waiting
            // for a query of its listeners that has not answered: then its group cannot wait for that query.
            const lane = member.lane;
            if (
              listeners !== undefined &&
              lane?.holder === member &&
              !member.marking &&
              member.inFlight > 0
            ) {
              breakLane(lane, refused(), true);
            }
            return;
          }
          case 'idle':
            member.state = 'ended';
            return;
          case 'waiting':
            member.state = 'ended';
            waiting.splice(waiting.indexOf(member), 1);
            member.grant?.reject(refused()); // its queries still waiting for a turn are refused
            return;
          case 'turn': {
            member.state = 'ended'; // every query from now on is refused
            const lane = member.lane!;
            const opened = await lane.opened.then(
              () => true,
              () => false,
            );
            if (!opened || lane.state !== 'open' || lane.holder !== member) return;
            if (listeners === undefined) await member.queue;
            // Abandoned with a query still running: the group cannot wait for it.
            else if (member.inFlight > 0) return breakLane(lane, refused(), true);
            if (await undoTurn(lane)) passTurn(lane);
          }
        }
      },
    };
  }

  return { join };
}

/** The `pid` of the last result of a multi-statement query (pg resolves one result per statement). */
function lastPid(results: unknown): number | undefined {
  const last: unknown = Array.isArray(results) ? results.at(-1) : undefined;
  const rows: unknown = typeof last === 'object' && last !== null ? Reflect.get(last, 'rows') : undefined;
  const pid: unknown = Array.isArray(rows) ? Reflect.get(Object(rows[0]), 'pid') : undefined;
  return typeof pid === 'number' ? pid : undefined;
}
