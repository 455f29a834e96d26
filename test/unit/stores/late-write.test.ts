import { LateWriteError, refuseLateWrites, unguarded } from '../../../lib/stores/late-write.js';

/** An ORM transaction as a class with private state (Kysely's are), which refuses another `this`. */
class Transaction {
  readonly #written: string[] = [];
  insert(row: string): Promise<number> {
    this.#written.push(row);
    return Promise.resolve(this.#written.length);
  }
  get written(): readonly string[] {
    return this.#written;
  }
}

describe('refuseLateWrites: what a listener holds as tx once its attempt has ended', () => {
  const guard = () => {
    let open = true;
    const tx = new Transaction();
    return { tx, guarded: refuseLateWrites(tx, () => open, 'TX.1:SUCCESSFUL'), end: () => (open = false) };
  };

  test('while the attempt is open, its methods run on the object itself', async () => {
    const { tx, guarded } = guard();
    expect(await guarded.insert('a')).toBe(1);
    const { insert } = guarded; // read, then called without a receiver
    expect(await insert('b')).toBe(2);
    expect(tx.written).toEqual(['a', 'b']);
    expect(guarded.insert).toBe(guarded.insert);
    expect(unguarded(guarded)).toBe(tx);
  });

  test('after the end, reading a member throws a LateWriteError naming the entry, and nothing is written', () => {
    const { tx, guarded, end } = guard();
    end();
    expect(() => guarded.insert('late')).toThrow(LateWriteError);
    expect(() => guarded.insert('late')).toThrow(/TX\.1:SUCCESSFUL.*\.insert/);
    expect(tx.written).toEqual([]);
  });

  test('a method read in time and called after the end is refused too', () => {
    const { tx, guarded, end } = guard();
    const { insert } = guarded;
    const bound = guarded.insert.bind(guarded);
    end();
    expect(() => insert('late')).toThrow(LateWriteError);
    expect(() => bound('late')).toThrow(LateWriteError);
    expect(tx.written).toEqual([]);
  });

  test('an ended handle is not a thenable: awaiting it neither throws nor writes', async () => {
    const { guarded, end } = guard();
    end();
    await expect(Promise.resolve(guarded)).resolves.toBe(guarded);
  });

  test('a callable handle (a Knex transaction) is refused when called after the end', () => {
    let open = true;
    const calls: string[] = [];
    const knexLike = Object.assign((table: string) => calls.push(table), { raw: () => 'raw' });
    const guarded = refuseLateWrites(knexLike, () => open, 'TX.2:SUCCESSFUL');
    guarded('ledger');
    expect(guarded.raw()).toBe('raw');
    open = false;
    expect(() => guarded('ledger')).toThrow(LateWriteError);
    expect(calls).toEqual(['ledger']);
  });
});
