import { DeliveryError, messageOf, StoreError } from '../shared/errors.js';
import { refuseLateWrites } from './late-write.js';
import type { DeliveryTransaction, TransactionState } from './store.js';
import type { Statement, StatementResult, Transactions } from './transactions.js';

/** Runs one statement in the delivery's transaction (through the ORM's `tx`). */
export type Run = (statement: Statement) => Promise<StatementResult>;

/**
 * What ends the ORM's transaction callback: commit (after the mark), or roll back; `settled`: the
 * listeners are done with `tx` (not an abandoned attempt's).
 */
type Decision = { commit: boolean; settled?: boolean };

/** Thrown inside the ORM's callback so that the ORM rolls back: the attempt was not delivered. */
class RolledBack extends DeliveryError {
  constructor() {
    super('the delivery attempt was not delivered: its transaction is rolled back');
  }
}

/**
 * Thrown by a dialect's `mark` (inside the ORM's callback, so the ORM rolls back what is left) when a
 * listener ended the delivery's transaction itself in a way that landed its writes, or may have: neither
 * marked delivered nor retried. `commit()` resolves it as `{ landed }`, as `rollback()` does after `landed`.
 */
export class Landed extends DeliveryError {
  /** `how`: what the listener sent through `tx`, as the dialect can tell it. */
  constructor(key: string, orm: string, how: string) {
    super(
      `a listener ended the delivery transaction of ${key} itself through tx (${how}, in ${orm}), so its ` +
        'writes landed, or may have, outside it: neither retried, which could write them again, nor marked ' +
        'delivered. Check them; replay the entry only if they are not there. Never end the transaction ' +
        'through tx: throw from the listener, and ipn-kit rolls back',
    );
  }
}

/**
 * `Landed`'s words for a listener that sent a raw `ROLLBACK` through `tx`, then resolved: the writes before
 * it were undone, and any after it committed one by one, on their own (autocommit). A retry could write
 * them again; nothing tells whether there were any.
 */
export const ROLLED_BACK =
  'a raw ROLLBACK, then resolved: anything it wrote after the ROLLBACK outside a transaction committed on its own';

/** Thrown inside the ORM's callback when the mark changed no row: another attempt holds the entry now. */
class LeaseLost extends DeliveryError {
  constructor(key: string) {
    super(`the lease on ${key} was lost: this attempt's writes are rolled back`);
  }
}

/**
 * Opens a delivery transaction in your ORM, for any store and dialect: the ORM's own transaction helper
 * (`transactions.transaction`) runs, and its callback hands the ORM's transaction object to the listeners,
 * then waits for delivery's decision. Delivered: the callback runs `mark` (the store's `delivered` update,
 * guarded by the lease) in the same transaction and returns, so the ORM commits the listeners' writes and
 * the mark together; a mark that changed no row (the lease was lost) throws, so the ORM rolls both back.
 * Not delivered: the callback throws at once (abandoned listeners' later uses of `tx` are refused, as every
 * use is once the attempt has ended), and the ORM rolls back.
 *
 * `dialect` holds what a dialect adds, each optional. `explain` turns a database error into words a partner
 * can act on (a dialect's detail, such as PostgreSQL's aborted transaction); `undefined` keeps the ORM's
 * message. `outcome` reads what the mark came to (by default: one row changed, delivered; none, the lease
 * was lost); it throws when the mark says something is wrong that a lost lease would hide, and the ORM
 * rolls back. `opening` runs in the transaction before the listeners do (a statement, or statements
 * through `run`), and `mark` may be made from what it returned, running statements of its own first: how a
 * dialect tells, at the mark, that a listener ended the transaction through `tx` (a raw `ROLLBACK`), after
 * which the mark would otherwise run on its own and commit `delivered` with no ledger row. A `mark` that
 * throws rolls back; one that throws {@link Landed} makes `commit()` resolve `{ landed }`. `landed`, from
 * what `opening` returned, tells the same when the attempt is not delivered, before the ORM rolls back:
 * what a listener sent (`'a raw COMMIT'`) when it committed the transaction itself, so its writes landed
 * and a retry would write them again; `rollback()` then resolves `{ landed }`. When `landed` throws (the
 * transaction cannot be asked through `tx` any more), `landedAfter` tells the same once the ORM's
 * transaction has ended, through a connection of its own; so does it when the mark failed, and `commit()`
 * then resolves `{ landed }` (the ORM never commits after a failed mark: a listener did). For an abandoned
 * attempt, whose listeners may still be using `tx`, only `landedAfter` is asked: at once, and when the
 * transaction was still open (a `COMMIT` of a listener's may still be running), again once the ORM's
 * transaction has ended.
 *
 * Resolves once the ORM has opened the transaction; rejects (a `StoreError`) when it could not.
 */
export async function openOrmTransaction<Tx>(
  transactions: Transactions<Tx>,
  key: string,
  mark: Statement | ((opened: StatementResult, run: Run) => Statement | Promise<Statement>),
  dialect: {
    explain?: (error: unknown) => string | undefined;
    outcome?: (result: StatementResult) => 'delivered' | 'lost';
    opening?: Statement | ((run: Run) => Promise<StatementResult>);
    landed?: (opened: StatementResult, run: Run) => Promise<string | undefined>;
    landedAfter?: (opened: StatementResult) => Promise<string | undefined>;
  } = {},
): Promise<DeliveryTransaction<Tx, never>> {
  const {
    explain = () => undefined,
    outcome = ({ count }) => (count === 1 ? 'delivered' : 'lost'),
    opening,
    landed,
    landedAfter,
  } = dialect;
  let state: TransactionState = 'idle';
  let decide!: (decision: Decision) => void;
  const decided = new Promise<Decision>((resolve) => (decide = resolve));
  let handOut!: (tx: Tx) => void;
  const handedOut = new Promise<Tx>((resolve) => (handOut = resolve));

  let runs = 0;
  let marked = false; // the mark ran in the ORM's transaction, and changed its one row
  let marking = false; // the listeners resolved, and the mark began: a failure from here on is the mark's
  // The listeners got the transaction: `finished`, settling at its end, has lost the race below, and an
  // error made for it there (a stack trace every delivery) would be waste.
  let begun = false;
  let landedBy: string | undefined; // what a listener committed the transaction with (`landed`)
  let untold = false; // `landed` could not tell: `landedAfter` is asked
  let openedWith: StatementResult | undefined; // what `opening` returned, for `landedAfter`
  /** The ORM's callback: hands its transaction to the listeners, then ends as delivery decides. */
  const work = async (tx: Tx): Promise<void> => {
    runs += 1;
    if (runs > 1) {
      // A transaction helper that runs its work again (a retry after a serialization failure): the
      // listeners wrote in the first run, which rolled back. The mark alone must not commit.
      throw new DeliveryError(
        `${transactions.name} ran the delivery transaction of ${key} a second time (a retry?): the ` +
          "listeners' writes went with the first one, so it is not committed; the attempt is retried",
      );
    }
    // What the mark needs to know of this transaction (PostgreSQL: its id, to tell whether a listener ended
    // it through `tx`), read before any listener runs.
    const run: Run = (statement) => transactions.query(tx, statement);
    const opened =
      opening === undefined
        ? { rows: [], count: 0 }
        : typeof opening === 'function'
          ? await opening(run)
          : await run(opening);
    openedWith = opened;
    begun = true;
    handOut(tx);
    const decision = await decided;
    // Rolled back at once, even while an abandoned attempt's listeners still run: their later uses of `tx`
    // are refused (refuseLateWrites, below), and a listener that hangs holds no lock and no connection.
    if (!decision.commit) {
      // Not told (the check failed: an aborted transaction, a lost connection, a transaction the ORM closed
      // on its own timeout): asked again once the ORM's transaction has ended (`landedAfter`).
      if (decision.settled && landed) {
        landedBy = await landed(opened, run).catch(() => void (untold = true));
      }
      throw new RolledBack();
    }
    marking = true;
    const statement = typeof mark === 'function' ? await mark(opened, run) : mark;
    if (outcome(await run(statement)) === 'lost') throw new LeaseLost(key);
    marked = true;
  };
  const finished = Promise.resolve()
    .then(() =>
      transactions.transaction((tx) => {
        const running = work(tx);
        running.catch(() => {}); // the ORM gets the rejection; one that drops it crashes no process
        return running;
      }),
    )
    .then(() => undefined);
  finished.catch(() => {}); // handled by commit(), rollback() or begin below, whichever runs

  const tx = await Promise.race([
    handedOut,
    finished.then(
      () => {
        if (begun) return undefined as never;
        throw new StoreError(`${transactions.name}: the transaction of ${key} ended before it began`);
      },
      (error: unknown) => {
        if (begun) return undefined as never;
        throw new StoreError(
          `could not open the delivery transaction of ${key} in ${transactions.name}: ${messageOf(error)} ` +
            '(is the connection pool exhausted, or the database unreachable? the attempt is retried)',
          { cause: error },
        );
      },
    ),
  ]);
  state = 'open';

  let guarded: Tx | undefined;
  return {
    // Once the attempt has ended, every use of it by a listener is refused here, whatever the ORM would do.
    // Made when first read: a store that hands out a guard of its own (a pool's client as `db`, every
    // exactly-once delivery through PostgresStore or MysqlStore) never reads this one.
    get tx() {
      return (guarded ??= refuseLateWrites(tx, () => state === 'open', key));
    },
    get state() {
      return state;
    },
    async commit() {
      if (state !== 'open') {
        throw new DeliveryError(`the delivery transaction of ${key} has ended: it cannot commit`);
      }
      state = 'ended';
      decide({ commit: true });
      try {
        await finished;
        if (!marked) {
          // The ORM's transaction ended before its callback did: the mark has not run in it.
          throw new StoreError(
            `${transactions.name}'s transaction() resolved before the work it was given did`,
          );
        }
        return 'delivered';
      } catch (error) {
        if (error instanceof LeaseLost) return 'lost';
        if (error instanceof Landed) return { landed: error.message };
        // The mark failed before the ORM could commit (PostgreSQL: in a transaction a listener began with a
        // raw BEGIN after committing the delivery's, whose statement it caught): asked, as for a rollback,
        // once the ORM's transaction has ended. Committed, the listeners' writes landed, and a retry would
        // write them again. (The ORM never commits after a failed mark: only a listener can have.)
        if (marking && !marked && landedAfter && openedWith) {
          const by = await landedAfter(openedWith).catch(() => undefined);
          if (by !== undefined) return { landed: new Landed(key, transactions.name, by).message };
        }
        const why = explain(error) ?? messageOf(error);
        throw new DeliveryError(
          `the delivery transaction of ${key} did not commit in ${transactions.name}: ${why}`,
          { cause: error },
        );
      }
    },
    async rollback(listeners) {
      if (state !== 'open') return;
      state = 'ended';
      decide({ commit: false, settled: listeners === undefined });
      if (listeners !== undefined) {
        // An abandoned attempt: a COMMIT a listener has already sent through tx (its later uses are refused)
        // is asked from outside at once, where the dialect can (`landedAfter`: the transaction stands
        // committed). Still open tells nothing yet: a COMMIT sent in time may still be running (a deferred
        // trigger) or queued in the driver behind the listener's query, and land after the answer. So the
        // transaction's end (the ORM's ROLLBACK, queued behind them) is waited for, and asked again: then
        // final. The caller bounds the wait (storeTimeoutMs) and settles a `{ landed }` that comes later.
        if (!landedAfter || !openedWith) return;
        const asked = await landedAfter(openedWith).catch(() => undefined);
        if (asked !== undefined) return { landed: new Landed(key, transactions.name, asked).message };
        await finished.catch(() => {});
        const after = await landedAfter(openedWith).catch(() => undefined);
        if (after !== undefined) return { landed: new Landed(key, transactions.name, after).message };
        return;
      }
      await finished.catch(() => {});
      if (untold && landedAfter && openedWith) {
        landedBy = await landedAfter(openedWith).catch(() => undefined);
      }
      if (landedBy !== undefined) return { landed: new Landed(key, transactions.name, landedBy).message };
    },
  };
}
