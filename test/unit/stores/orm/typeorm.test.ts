import { DataSource } from 'typeorm';
import { typeormTransactions } from '../../../../lib/orm.js';

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

test('a DataSource not yet initialized: the transaction and execute reject, saying to initialize it', async () => {
  const transactions = typeormTransactions(
    new DataSource({ type: 'postgres', url: 'postgres://localhost/none' }),
  );
  const initialize = /the DataSource is not initialized: await dataSource\.initialize\(\) first/;
  await expect(transactions.transaction(() => Promise.resolve())).rejects.toThrow(initialize);
  await expect(transactions.execute!({ text: 'SELECT 1', values: [], returns: 'rows' })).rejects.toThrow(
    initialize,
  );
});
