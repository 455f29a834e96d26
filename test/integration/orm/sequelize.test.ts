import { sequelizeTransactions } from '../../../lib/orm.js';
import { fixture } from '../../fixtures/orm/sequelize.js';
import { describeWithService } from '../../helpers/services.js';
import { runOrmScenarios } from '../../helpers/orm-scenarios.js';
import { transactionsContract } from '../../helpers/transactions-contract.js';

jest.setTimeout(30_000);

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
  ])('refuses %s with a TypeError that says what it wants', (_, value, got) => {
    expect(() => sequelizeTransactions(value as never)).toThrow(TypeError);
    expect(() => sequelizeTransactions(value as never)).toThrow(
      /^sequelizeTransactions: expected a Sequelize instance/,
    );
    expect(() => sequelizeTransactions(value as never)).toThrow(got);
  });
});

describeWithService('PostgreSQL', 'sequelizeTransactions against PostgreSQL', () => {
  transactionsContract('ipn_sequelize', (schema) => fixture.open(schema));
});

runOrmScenarios(require.resolve('../../fixtures/orm/sequelize.ts'));
