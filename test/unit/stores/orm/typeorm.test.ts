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
