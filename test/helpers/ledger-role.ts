import { Pool, type PoolClient } from 'pg';
import type { ledgerSchema } from './ledger-schema.js';
import { databaseUrl } from './services.js';

/**
 * For a test file on `ledger`'s schema whose pools run as an app's role: the role `<schema>_<suffix>`
 * (NOLOGIN: a superuser's connection takes it with `SET ROLE` or `SET SESSION AUTHORIZATION`), made with
 * every privilege on the schema's tables, sequences and functions. At the end the file's `pools` (that
 * array, filled as the tests make them) are ended, then the role is dropped with what it was granted.
 * Declared after `ledgerSchema`, whose own end (declared first, run first) drops the schema.
 */
export function ledgerRole(ledger: ReturnType<typeof ledgerSchema>, suffix: string, pools: Pool[]): string {
  const role = `${ledger.schema}_${suffix}`;
  beforeAll(async () => {
    const admin = ledger.pool();
    await admin.query(`CREATE ROLE ${role} NOLOGIN`);
    await admin.query(`GRANT USAGE ON SCHEMA ${ledger.schema} TO ${role}`);
    await admin.query(`GRANT ALL ON ALL TABLES IN SCHEMA ${ledger.schema} TO ${role}`);
    await admin.query(`GRANT ALL ON ALL SEQUENCES IN SCHEMA ${ledger.schema} TO ${role}`);
    await admin.query(`GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA ${ledger.schema} TO ${role}`);
  });
  afterAll(async () => {
    await Promise.all(pools.map((pool) => pool.end()));
    const admin = new Pool({ connectionString: databaseUrl(), max: 1 });
    await admin
      .query(`DROP OWNED BY ${role}`)
      .then(() => admin.query(`DROP ROLE IF EXISTS ${role}`))
      .finally(() => admin.end());
  });
  return role;
}

/**
 * Records in `sent` the text of every query `client` is sent from now on (a pool's `connect` event: what a
 * delivery sends on that connection), the first argument's text.
 */
export function recordQueries(client: PoolClient, sent: string[]): void {
  const query = client.query.bind(client) as (...args: unknown[]) => unknown;
  client.query = ((...args: unknown[]) => {
    sent.push(typeof args[0] === 'string' ? args[0] : String(Reflect.get(Object(args[0]), 'text')));
    return query(...args);
  }) as typeof client.query;
}
