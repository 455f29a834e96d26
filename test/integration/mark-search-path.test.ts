import { creditedOnce } from '../helpers/credited-once.js';
import { servedRouters } from '../helpers/servers.js';
import { ledgerSchema } from '../helpers/ledger-schema.js';
import { describeWithService } from '../helpers/services.js';

jest.setTimeout(30_000);

// The exactly-once mark (schema version 6: `<table>_mark`, named without a schema for an inbox named
// without one) runs in the delivery's transaction, after the listeners: a `SET LOCAL search_path` a listener
// sent through `db` is still in force there, and the inbox and its function are not found under it.
describeWithService('PostgreSQL', 'the mark after a listener set search_path for its transaction', () => {
  const ledger = ledgerSchema('ipn_rv_path');
  const serve = servedRouters();

  test.each([
    ['SET LOCAL search_path', 'SET LOCAL search_path TO pg_catalog'],
    // A quoted name is the same setting to PostgreSQL.
    ['SET LOCAL "search_path"', 'SET LOCAL "search_path" TO pg_catalog'],
    ["set_config('search_path', ..., true)", "SELECT set_config('search_path', 'pg_catalog', true)"],
  ])('%s: the payment is credited once, and the store keeps the function', async (_, setPath) => {
    await creditedOnce(ledger, serve, ledger.pool(), (db) => db.query(setPath));
  });
});
