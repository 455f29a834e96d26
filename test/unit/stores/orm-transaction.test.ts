import { openOrmTransaction } from '../../../lib/stores/orm-transaction.js';
import type { Statement, Transactions } from '../../../lib/stores/transactions.js';

/**
 * `openOrmTransaction` against `Transactions` that break the contract in ways a hand-written one can (a
 * retry that runs the work again, a helper that does not wait for its work): never `delivered` without the
 * mark having run in the transaction the listeners wrote in, never an unhandled rejection. (The scenarios
 * against a real database are in test/integration/transaction-escapes.test.ts and the orm-scenarios.)
 */
const mark: Statement = { text: 'UPDATE inbox SET status = $1', values: ['delivered'], returns: 'count' };

/** Records the unhandled rejections while `run` runs, and a turn of the event loop after it. */
async function unhandledDuring(run: () => Promise<void>): Promise<unknown[]> {
  const seen: unknown[] = [];
  const record = (reason: unknown) => void seen.push(reason);
  process.on('unhandledRejection', record);
  try {
    await run();
    await new Promise((resolve) => setTimeout(resolve, 20));
  } finally {
    process.off('unhandledRejection', record);
  }
  return seen;
}

describe('openOrmTransaction with a Transactions that breaks its contract', () => {
  test('a transaction() that resolves before its work did: the commit is not delivered', async () => {
    const marks: string[] = [];
    const careless: Transactions<string> = {
      name: 'careless',
      transaction(work) {
        void work('tx').catch(() => {});
        return Promise.resolve(undefined as never);
      },
      query(tx, statement) {
        marks.push(`${tx}: ${statement.text}`);
        return Promise.resolve({ rows: [], count: 1 });
      },
    };
    const opened = await openOrmTransaction(careless, 'K:SUCCESSFUL', mark);
    await expect(opened.commit()).rejects.toThrow(/resolved before the work it was given did/);
  });

  test('a transaction() that drops the rejection of its work: no unhandled rejection', async () => {
    const dropping: Transactions<string> = {
      name: 'dropping',
      transaction(work) {
        void work('tx'); // its rejection (a rolled back attempt) is nobody's
        return new Promise<never>(() => {}); // and it never ends
      },
      query: () => Promise.resolve({ rows: [], count: 1 }),
    };
    const seen = await unhandledDuring(async () => {
      const opened = await openOrmTransaction(dropping, 'K:SUCCESSFUL', mark);
      await opened.rollback(Promise.resolve()); // an abandoned attempt: not waited for
    });
    expect(seen).toEqual([]);
  });

  test('a transaction() that runs its work again after a failed commit: the second run commits nothing', async () => {
    const statements: string[] = [];
    let run = 0;
    const retrying: Transactions<string> = {
      name: 'retrying',
      async transaction(work) {
        for (;;) {
          run += 1;
          const result = await work(`tx${run}`);
          if (run === 1) continue; // the COMMIT failed (40001): run the work again
          return result;
        }
      },
      query(tx, statement) {
        statements.push(`${tx}: ${statement.text}`);
        return Promise.resolve({ rows: [], count: 1 });
      },
    };
    const opened = await openOrmTransaction(retrying, 'K:SUCCESSFUL', mark);
    expect(opened.tx).toBe('tx1');
    await expect(opened.commit()).rejects.toThrow(
      /ran the delivery transaction of K:SUCCESSFUL a second time/,
    );
    expect(statements).toEqual([`tx1: ${mark.text}`]); // never the mark alone, in the second run
  });
});

describe('openOrmTransaction: an abandoned attempt (its listeners may still run)', () => {
  /** A transaction() that ends only when `end()` is called (a listener's query holds the connection). */
  const held = () => {
    let end!: () => void;
    const ended = new Promise<never>((_, reject) => (end = () => reject(new Error('rolled back'))));
    const transactions: Transactions<string> = {
      name: 'held',
      transaction(work) {
        void work('tx').catch(() => {});
        return ended;
      },
      query: () => Promise.resolve({ rows: [{ xid: '42' }], count: 1 }),
    };
    return { transactions, end };
  };
  const opening: Statement = { text: 'SELECT txid', values: [], returns: 'rows' };
  const landedWords = { landed: expect.stringMatching(/itself through tx \(a raw COMMIT, in held\)/) };

  test.each<[string, Array<() => Promise<string | undefined>>, unknown]>([
    ['committed: landed, without waiting for the ORM', [() => Promise.resolve('a raw COMMIT')], landedWords],
  ])('landedAfter is asked at once, %s', async (_what, answers, expected) => {
    const asked: unknown[] = [];
    const { transactions } = held();
    const opened = await openOrmTransaction(transactions, 'K:SUCCESSFUL', mark, {
      opening,
      landedAfter: (openedWith) => {
        asked.push(openedWith.rows[0]);
        return answers[asked.length - 1]!();
      },
    });
    await expect(opened.rollback(new Promise(() => {}))).resolves.toEqual(expected);
    expect(asked).toEqual([{ xid: '42' }]);
  });

  // Still open at once tells nothing yet: a COMMIT a listener sent in time may still be running, and land.
  test.each<[string, Array<() => Promise<string | undefined>>, unknown]>([
    [
      "a COMMIT still running: landed, once the ORM's transaction ended",
      [() => Promise.resolve(undefined), () => Promise.resolve('a raw COMMIT')],
      landedWords,
    ],
    [
      'still open, then rolled back: nothing told',
      [() => Promise.resolve(undefined), () => Promise.resolve(undefined)],
      undefined,
    ],
    [
      'not askable: nothing told',
      [() => Promise.reject(new Error('pool gone')), () => Promise.reject(new Error('pool gone'))],
      undefined,
    ],
  ])('landedAfter is asked at once and again at the end, %s', async (_what, answers, expected) => {
    const asked: unknown[] = [];
    const { transactions, end } = held();
    const opened = await openOrmTransaction(transactions, 'K:SUCCESSFUL', mark, {
      opening,
      landedAfter: (openedWith) => {
        asked.push(openedWith.rows[0]);
        return answers[asked.length - 1]!();
      },
    });
    let told = false;
    const rolledBack = opened.rollback(new Promise(() => {}));
    void rolledBack.then(() => (told = true));
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(told).toBe(false); // not before the ORM's transaction ended
    expect(asked).toEqual([{ xid: '42' }]);
    end();
    await expect(rolledBack).resolves.toEqual(expected);
    expect(asked).toEqual([{ xid: '42' }, { xid: '42' }]);
  });
});

describe('openOrmTransaction: a mark that fails', () => {
  /** A transaction helper whose mark statement rejects (`mark`), or whose COMMIT does, after the mark (`commit`). */
  const failing = (fails: 'mark' | 'commit'): Transactions<string> => ({
    name: 'failing',
    async transaction(work) {
      const result = await work('tx');
      if (fails === 'commit') throw new Error('the COMMIT failed (its answer lost)');
      return result;
    },
    query: (_tx, statement) =>
      fails === 'mark' && statement === mark
        ? Promise.reject(new Error('current transaction is aborted'))
        : Promise.resolve({ rows: [], count: 1 }),
  });

  // A listener committed the delivery's transaction through tx, then began one of its own whose statement
  // failed: the mark fails in it. The failed commit asked nothing, and the retry wrote the writes again.
  test('asked once the transaction has ended: committed (by a listener), commit() resolves { landed }', async () => {
    const asked: unknown[] = [];
    const opened = await openOrmTransaction(failing('mark'), 'K:SUCCESSFUL', mark, {
      landedAfter: (openedWith) => {
        asked.push(openedWith);
        return Promise.resolve('a raw COMMIT');
      },
    });
    await expect(opened.commit()).resolves.toEqual({
      landed: expect.stringMatching(/of K:SUCCESSFUL itself through tx \(a raw COMMIT, in failing\)/),
    });
    expect(asked).toHaveLength(1);
  });

  test('not committed, or the question failed: commit() rejects, as before', async () => {
    for (const answer of [Promise.resolve(undefined), Promise.reject(new Error('the pool is down'))]) {
      answer.catch(() => {});
      const opened = await openOrmTransaction(failing('mark'), 'K:SUCCESSFUL', mark, {
        landedAfter: () => answer,
      });
      await expect(opened.commit()).rejects.toThrow(
        /did not commit in failing: current transaction is aborted/,
      );
    }
  });

  // The mark ran and the ORM's COMMIT failed (its answer lost): the COMMIT may have landed, with the mark,
  // which the entry read tells; a committed transaction must not be taken for a listener's.
  test("a COMMIT of the ORM's own that failed after the mark ran: nothing asked, commit() rejects", async () => {
    let asked = 0;
    const opened = await openOrmTransaction(failing('commit'), 'K:SUCCESSFUL', mark, {
      landedAfter: () => {
        asked += 1;
        return Promise.resolve('a raw COMMIT');
      },
    });
    await expect(opened.commit()).rejects.toThrow(/the COMMIT failed/);
    expect(asked).toBe(0);
  });
});
