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
});
