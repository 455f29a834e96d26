import { refuseEnd } from '../../../../lib/stores/orm/refuse-end.js';

describe('refuseEnd', () => {
  class Transaction {
    readonly id = 'tx-1';
    readonly savepoints: string[] = [];
    commit(): string {
      return 'committed';
    }
    rollback(): string {
      return 'rolled back';
    }
    savepoint(name: string): this {
      this.savepoints.push(name);
      return this;
    }
  }

  test('commit() and rollback() throw a TypeError naming the ORM and the fix', () => {
    const tx = refuseEnd(new Transaction(), 'Sequelize');
    expect(() => tx.commit()).toThrow(TypeError);
    expect(() => tx.commit()).toThrow(
      /^Sequelize: a listener cannot commit the delivery's transaction \(tx\.commit\(\)\)/,
    );
    expect(() => tx.rollback()).toThrow(/cannot roll back .*\(tx\.rollback\(\)\).*throw from the listener/);
  });

  test('everything else is the object itself: its fields, its methods (on the same state), its class', () => {
    const target = new Transaction();
    const tx = refuseEnd(target, 'Sequelize');
    expect(tx.id).toBe('tx-1');
    tx.savepoint('a');
    expect(target.savepoints).toEqual(['a']);
    expect(tx).toBeInstanceOf(Transaction);
    expect(target.commit()).toBe('committed'); // the ORM's own calls, on the object itself
  });

  test('a callable transaction (Knex) stays callable', () => {
    const trx = Object.assign((table: string) => `builder of ${table}`, { commit: () => 'committed' });
    const tx = refuseEnd(trx, 'Knex');
    expect(tx('ledger')).toBe('builder of ledger');
    expect(() => tx.commit()).toThrow(/^Knex: a listener cannot commit/);
  });
});
