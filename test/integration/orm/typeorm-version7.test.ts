import { DataSource } from 'typeorm';
import { IpnInboxEntry } from '../../../examples/snippets/orm/typeorm.js';
import { postgresMigrations, PostgresStore } from '../../../lib/postgres.js';
import { bareSchema } from '../../helpers/bare-schema.js';
import { databaseUrl, describeWithService } from '../../helpers/services.js';

jest.setTimeout(30_000);

/**
 * The documented inbox entity declares version 7's CHECK. On a database at version 6 that holds an older
 * ipn-kit's claim (a marker row in the inbox), `synchronize` would add that CHECK itself, checking every row,
 * and fail `initialize()`: docs/orm.md says to run version 7 first, and this is why.
 */
describeWithService('PostgreSQL', 'TypeORM synchronize across schema version 7', () => {
  const bare = bareSchema('ipn_typeorm_v7');
  const opened: DataSource[] = [];
  afterAll(() => Promise.all(opened.filter((d) => d.isInitialized).map((d) => d.destroy())));

  const atVersion6WithAClaim = async (): Promise<void> => {
    const pool = bare.pool();
    await pool.query('DROP TABLE IF EXISTS ipn_inbox, ipn_inbox_schema CASCADE');
    for (const migration of postgresMigrations().slice(0, 6)) await pool.query(migration.sql);
    await pool.query(`INSERT INTO ipn_inbox (key, transaction_id, state, record, status, delivered_at, lease_id)
      VALUES ('EFB.7000001:SUCCESSFUL', 'EFB.7000001', 'SUCCESSFUL', '{}'::jsonb, 'delivered', now(), 'token')`);
  };
  const initialize = (): Promise<DataSource> => {
    const dataSource = new DataSource({
      type: 'postgres',
      url: databaseUrl(),
      entities: [IpnInboxEntry],
      synchronize: true,
      extra: { max: 2, options: `-c search_path=${bare.schema}` },
    });
    opened.push(dataSource);
    return dataSource.initialize();
  };

  test('store.migrate() before initialize(): synchronize changes nothing, and the claim holds until released', async () => {
    await atVersion6WithAClaim();
    const store = new PostgresStore({ pool: bare.pool(), table: 'ipn_inbox' });
    await store.migrate();
    await initialize(); // the CHECK is there by its name (NOT VALID): synchronize leaves it, and the claim
    expect(await store.claim('EFB.7000001:SUCCESSFUL', 60_000, 'another')).toBe(false);
    await bare.pool().query(`DELETE FROM ipn_inbox WHERE key = 'EFB.7000001:SUCCESSFUL'`); // 0.1.0's release
    expect(await store.claim('EFB.7000001:SUCCESSFUL', 60_000, 'another')).toBe(true);
  });

  test('initialize() first: synchronize adds the CHECK itself and fails on the claim', async () => {
    await atVersion6WithAClaim();
    await expect(initialize()).rejects.toThrow(/ipn_kit_no_claim_marker/);
  });
});
