import { createPool, type RowDataPacket } from 'mysql2/promise';
import { MysqlStore } from '../../lib/mysql.js';
import { startInstance, type Instance } from '../helpers/instances.js';
import { uniquePayload } from '../helpers/payloads.js';
import { postCopies } from '../helpers/servers.js';
import { describeWithService, eventually, mysqlUrl } from '../helpers/services.js';

// Each process start costs a second or two of CPU on a shared 2-core machine.
jest.setTimeout(90_000);

describeWithService('MariaDB', 'app processes sharing one MySQL (MariaDB) through MysqlStore', () => {
  const suffix = `${process.pid}_${Date.now() % 100_000}`;
  const table = `ipn_mymp_${suffix}`;
  const ledger = `ledger_mymp_${suffix}`;
  const pool = createPool({ uri: mysqlUrl(), connectionLimit: 4 });
  const instances: Instance[] = [];

  beforeAll(async () => {
    await new MysqlStore({ pool, table }).migrate();
    // No unique key: a second credit of a payment would be a second row.
    await pool.query(`CREATE TABLE ${ledger} (transaction_id VARCHAR(255) NOT NULL, amount DOUBLE)`);
  });
  afterEach(async () => {
    await Promise.all(instances.splice(0).map((instance) => instance.kill('SIGKILL')));
  });
  afterAll(async () => {
    await pool.query(`DROP TABLE IF EXISTS ${table}, ${table}_expected, ${ledger}`);
    await pool.end();
  });

  async function start(config: Record<string, unknown>): Promise<Instance> {
    const instance = await startInstance({
      store: 'mysql',
      namespace: table,
      ledgerTable: ledger,
      ...config,
    });
    instances.push(instance);
    return instance;
  }
  const keyOf = (payload: Record<string, unknown>) => `${String(payload.transaction_id)}:SUCCESSFUL`;
  async function entryOf(key: string) {
    const [rows] = await pool.query<RowDataPacket[]>(
      `SELECT status, attempts FROM ${table} WHERE \`key\` = ?`,
      [key],
    );
    return rows[0] as { status: string; attempts: number } | undefined;
  }
  async function ledgerRows(id: unknown): Promise<number> {
    const [rows] = await pool.query<RowDataPacket[]>(
      `SELECT COUNT(*) AS n FROM ${ledger} WHERE transaction_id = ?`,
      [id],
    );
    return Number(rows[0]?.n);
  }
  async function total(pair: Instance[]): Promise<number> {
    const counts = await Promise.all(pair.map((instance) => instance.successful()));
    return counts.reduce((sum, count) => sum + count, 0);
  }
  /** Posts `copies` copies of each payment, all at once, alternating between the instances. */
  const fire = (pair: Instance[], payloads: Array<Record<string, unknown>>, copies: number) =>
    Promise.all(
      payloads.map((payload) =>
        postCopies(
          pair.map((instance) => instance.url),
          payload,
          copies,
          '',
        ),
      ),
    );

  test.each(['at-most-once', 'at-least-once'])(
    '%s: 5 notifications x 20 concurrent copies to two processes give exactly 5 events in total',
    async (delivery) => {
      const pair = [
        await start({ delivery, listener: 'count' }),
        await start({ delivery, listener: 'count' }),
      ];
      const payloads = Array.from({ length: 5 }, () => uniquePayload());

      const answers = await fire(pair, payloads, 20);

      expect(answers.flat()).toEqual(Array(100).fill(200));
      // At most once a claim is a row of <table>_claims (schema version 7), never an inbox entry.
      const atMostOnce = delivery === 'at-most-once';
      if (atMostOnce) await eventually('5 events', async () => (await total(pair)) >= 5);
      else
        for (const payload of payloads) {
          await eventually(
            `${keyOf(payload)} delivered`,
            async () => (await entryOf(keyOf(payload)))?.status === 'delivered',
          );
        }
      expect(await total(pair)).toBe(5);
      const count = async (of: string) => {
        const [rows] = await pool.query<RowDataPacket[]>(
          `SELECT COUNT(*) AS n FROM ${of} WHERE \`key\` IN (?)`,
          [payloads.map(keyOf)],
        );
        return Number(rows[0]?.n);
      };
      expect(await count(table)).toBe(atMostOnce ? 0 : 5);
      if (atMostOnce) expect(await count(`${table}_claims`)).toBe(5);
    },
  );

  test('at least once, a ledger row written through db, then a throw on attempt 1: 5 x 20 copies, one row per payment', async () => {
    const config = {
      delivery: 'at-least-once',
      listener: 'ledger',
      failFirst: true,
      retryDelayMs: 50,
      recoveryIntervalMs: 100,
    };
    const pair = [await start(config), await start(config)];
    const payloads = Array.from({ length: 5 }, () => uniquePayload());

    const answers = await fire(pair, payloads, 20);

    expect(answers.flat()).toEqual(Array(100).fill(200));
    for (const payload of payloads) {
      await eventually(
        `${keyOf(payload)} delivered`,
        async () => (await entryOf(keyOf(payload)))?.status === 'delivered',
      );
      expect(await entryOf(keyOf(payload))).toMatchObject({ attempts: 2 });
      expect(await ledgerRows(payload.transaction_id)).toBe(1);
    }
  });

  test('a process killed (SIGKILL) after its 200, its ledger row written and before its listener finished: the next delivers it once', async () => {
    const config = { delivery: 'at-least-once', leaseMs: 1_500, recoveryIntervalMs: 200 };
    const doomed = await start({ ...config, listener: 'ledger-hang' });
    const payload = uniquePayload();
    const key = keyOf(payload);

    const [answers] = await fire([doomed], [payload], 1);
    expect(answers).toEqual([200]); // acknowledged: the service will not resend
    await doomed.started(payload.transaction_id as string); // its ledger row is written, not committed
    await doomed.kill('SIGKILL');
    expect(await entryOf(key)).toMatchObject({ status: 'received', attempts: 1 });
    expect(await ledgerRows(payload.transaction_id)).toBe(0); // its write died with its connection

    const survivor = await start({ ...config, listener: 'ledger' });
    await eventually(`${key} delivered`, async () => (await entryOf(key))?.status === 'delivered');
    expect(await entryOf(key)).toMatchObject({ attempts: 2 });
    expect(await ledgerRows(payload.transaction_id)).toBe(1);

    // A late resend changes nothing.
    expect((await fire([survivor], [payload], 3))[0]).toEqual([200, 200, 200]);
    expect(await ledgerRows(payload.transaction_id)).toBe(1);
    expect(await survivor.successful()).toBe(1);
  });
});
