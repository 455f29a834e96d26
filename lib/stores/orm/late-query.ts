import { DeliveryError } from '../../shared/errors.js';

/**
 * A query an adapter refused because it came through a delivery's transaction once that had ended: a query
 * builder a listener took from `tx` in time (lazy until awaited) and ran after its attempt ended. The core's
 * guard on `tx` cannot see it (the builder no longer reads `tx`), so the adapter refuses it where the ORM
 * runs it. One wording for every adapter that does (`adapter`: `'drizzleTransactions'`, ...).
 */
export class LateQueryError extends DeliveryError {
  constructor(adapter: string) {
    super(
      `${adapter}: a query through a delivery's transaction once it has ended (a query builder taken from tx ` +
        'in time, run after the attempt ended) was not made: await every write in the listener',
    );
  }
}
