/**
 * The ORM's transaction object as listeners get it: the same object (a Proxy of it, of the same type), whose
 * `commit()` and `rollback()` throw. ipn-kit ends the transaction itself once every listener has settled:
 * it commits with the `delivered` mark, or rolls back. A listener that committed it first would commit its
 * writes without the mark, so that the retried attempt writes them again; one that rolled it back would
 * fail the mark with an error that names neither. For ORMs whose transaction object has these methods
 * (Knex, Sequelize); the ORM's own calls go to the object itself, never through this Proxy.
 */
export function refuseEnd<Tx>(tx: Tx, orm: string): Tx {
  const refuse = (method: string) => () => {
    throw new TypeError(
      `${orm}: a listener cannot ${method === 'commit' ? 'commit' : 'roll back'} the delivery's transaction ` +
        `(tx.${method}()): ipn-kit commits it together with the delivered mark once every listener has ` +
        'resolved. To roll it back, throw from the listener; to undo part of it, use a nested transaction ' +
        '(a savepoint).',
    );
  };
  return new Proxy(tx as object, {
    get(target, property, receiver) {
      if (property === 'commit' || property === 'rollback') return refuse(property);
      return Reflect.get(target, property, receiver) as unknown;
    },
  }) as Tx;
}
