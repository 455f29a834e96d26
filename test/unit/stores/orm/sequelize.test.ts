import { sequelizeTransactions } from '../../../../lib/orm.js';

describe('sequelizeTransactions', () => {
  test.each([
    ['undefined', undefined, /got undefined$/],
    ['the Sequelize class itself', class Sequelize {}, /got the function Sequelize \(construct it/],
    [
      'a Transaction',
      new (class Transaction {
        commit() {}
      })(),
      /got an instance of Transaction$/,
    ],
    [
      'a TypeORM DataSource (it has a transaction() and a query() too)',
      new (class DataSource {
        transaction() {}
        query() {}
      })(),
      /got an instance of DataSource$/,
    ],
  ])('refuses %s with a TypeError that says what it wants', (_, value, got) => {
    expect(() => sequelizeTransactions(value as never)).toThrow(TypeError);
    expect(() => sequelizeTransactions(value as never)).toThrow(
      /^sequelizeTransactions: expected a Sequelize instance/,
    );
    expect(() => sequelizeTransactions(value as never)).toThrow(got);
  });

  /** A stand-in Sequelize that records the options of each query. */
  function recordingSequelize() {
    const options: Array<Record<string, unknown>> = [];
    const sequelize = {
      transaction: (work: (t: object) => Promise<unknown>) => work({}),
      query: (_sql: string, given: Record<string, unknown>) => {
        options.push(given);
        return Promise.resolve(given.type === 'SELECT' ? [] : 0);
      },
      getQueryInterface: () => ({}),
    };
    return { transactions: sequelizeTransactions(sequelize), options };
  }

  test("binds a $n text's values (PostgreSQL), and gives a ? text's as replacements (MySQL)", async () => {
    const { transactions, options } = recordingSequelize();
    await transactions.execute!({ text: 'UPDATE t SET a = $1', values: [1], returns: 'count' });
    await transactions.execute!({ text: 'UPDATE t SET a = ?', values: [undefined], returns: 'count' });
    await transactions.execute!({ text: 'SELECT 1', values: [], returns: 'rows' });
    expect(options).toEqual([
      expect.objectContaining({ bind: [1], type: 'BULKUPDATE' }),
      expect.objectContaining({ replacements: [null], type: 'BULKUPDATE' }),
      expect.objectContaining({ type: 'SELECT' }),
    ]);
    expect(options[0]).not.toHaveProperty('replacements');
    expect(options[1]).not.toHaveProperty('bind');
    expect(options[2]).not.toHaveProperty('bind');
    expect(options[2]).not.toHaveProperty('replacements');
  });
});
