import { typeormTransactions } from '../../../lib/orm.js';
import { fixture } from '../../fixtures/orm/typeorm.js';
import { describeWithService } from '../../helpers/services.js';
import { runOrmScenarios } from '../../helpers/orm-scenarios.js';
import { transactionsContract } from '../../helpers/transactions-contract.js';

jest.setTimeout(30_000);

describe('typeormTransactions', () => {
  test.each([
    ['undefined', undefined, /got undefined$/],
    ['its options', { type: 'postgres' }, /got a plain object$/],
    [
      'an EntityManager',
      new (class EntityManager {
        transaction() {}
      })(),
      /got an instance of EntityManager$/,
    ],
  ])('refuses %s with a TypeError that says what it wants', (_, value, got) => {
    expect(() => typeormTransactions(value as never)).toThrow(TypeError);
    expect(() => typeormTransactions(value as never)).toThrow(
      /^typeormTransactions: expected a TypeORM DataSource/,
    );
    expect(() => typeormTransactions(value as never)).toThrow(got);
  });
});

describeWithService('PostgreSQL', 'typeormTransactions against PostgreSQL', () => {
  transactionsContract('ipn_typeorm', (schema) => fixture.open(schema));
});

runOrmScenarios(require.resolve('../../fixtures/orm/typeorm.ts'));
