/**
 * What PostgreSQL itself spends per notification, on its own CPU, for each statement the durable inbox
 * makes: `npx tsx bench/postgres-cost.ts`. No HTTP and no router: the store's statements, sent in batches
 * of several sizes (group commit makes the batches; their size depends on the load), and the transaction
 * of an exactly-once delivery, beside the hand-written handler's one insert (the issue-27 reference) and
 * the parts between the two: the same write in a transaction, then with ipn-kit's `delivered` mark. Needs PostgreSQL on this machine (its CPU is read from /proc); uses
 * DATABASE_URL and a table of its own, dropped at the end.
 */
import { randomUUID } from 'node:crypto';
import { Pool } from 'pg';
import { PostgresStore } from '../lib/postgres.js';
import { inboxSql, receivesJson } from '../lib/stores/postgres/postgres-sql.js';
import { bodyFor } from './payload.js';
import { openPostgres } from './services.js';
import { databaseUrl } from './variants.js';

const TABLE = `ipn_cost_${process.pid}`;
const NOTIFICATIONS = 4_000;

async function main(): Promise<void> {
  const service = await openPostgres(databaseUrl(), TABLE);
  const pool = new Pool({ connectionString: databaseUrl(), max: 1 });
  try {
    if ((await service.cpuMicros()) === undefined) {
      console.log('postgres-cost: PostgreSQL does not run on this machine: its CPU cannot be read');
      return;
    }
    const sql = inboxSql(TABLE);
    const record = bodyFor()('PIX_22827809');
    // `prepare` runs first, uncounted: the receives whose marks a row measures alone.
    const costOf = async (
      label: string,
      work: () => Promise<void>,
      prepare?: () => Promise<void>,
    ): Promise<void> => {
      await service.reset();
      await prepare?.();
      const before = (await service.cpuMicros())!;
      const started = process.cpuUsage();
      await work();
      const node = process.cpuUsage(started);
      const spent = (await service.cpuMicros())! - before;
      console.log(
        `${label.padEnd(58)} PostgreSQL ${(spent / NOTIFICATIONS).toFixed(0).padStart(5)} µs, ` +
          `this client ${((node.user + node.system) / NOTIFICATIONS).toFixed(0).padStart(4)} µs per notification`,
      );
    };
    let run = 0;
    const keysOf = (size: number, batch: number) =>
      Array.from({ length: size }, (_, index) => `C${run}.${batch}.${index}:SUCCESSFUL`);
    const receiveMany = async (keys: string[], leases: string[]) => {
      const receives = keys.map((key, index) => [
        key,
        key.split(':')[0],
        'SUCCESSFUL',
        record,
        leases[index],
        60_000,
      ]);
      await pool.query(sql.receiveMany, [receivesJson(receives)]);
    };
    for (const size of [1, 10, 40]) {
      run += 1;
      await costOf(`receive + delivered, batches of ${size}`, async () => {
        for (let batch = 0; batch < NOTIFICATIONS / size; batch += 1) {
          const keys = keysOf(size, batch);
          const leases = keys.map(() => randomUUID());
          await receiveMany(keys, leases);
          await pool.query(sql.deliveredMany, [keys, leases]);
        }
      });
    }
    const insert = `INSERT INTO "${TABLE}_ledger" (transaction_id, order_id, amount) VALUES ($1, $2, $3)`;
    // The physical floor, statement by statement: the hand-written handler's one insert, the same write in a
    // transaction of its own, and that transaction with ipn-kit's `delivered` mark (an update of the
    // inbox row received before, batched by ten as under load) sent with the COMMIT.
    run += 1;
    const handwritten =
      `INSERT INTO "${TABLE}_handwritten" (transaction_id, state, order_id, amount) VALUES ($1, $2, $3, $4) ` +
      'ON CONFLICT (transaction_id, state) DO NOTHING';
    await costOf('the hand-written handler: one insert, autocommit', async () => {
      for (let index = 0; index < NOTIFICATIONS; index += 1) {
        await pool.query(handwritten, [`C${run}.${index}`, 'SUCCESSFUL', 'order', 100]);
      }
    });
    run += 1;
    await costOf('BEGIN, one ledger insert, COMMIT (no inbox)', async () => {
      for (let index = 0; index < NOTIFICATIONS; index += 1) {
        const client = await pool.connect();
        await client.query('BEGIN');
        await client.query(insert, [`C${run}.${index}:SUCCESSFUL`, 'order', 100]);
        await client.query('COMMIT');
        client.release();
      }
    });
    run += 1;
    const received = Array.from({ length: NOTIFICATIONS }, (_, index) => ({
      key: `C${run}.${index}:SUCCESSFUL`,
      lease: randomUUID(),
    }));
    await costOf(
      'BEGIN, one ledger insert, the mark with COMMIT (receives apart)',
      async () => {
        for (const { key, lease } of received) {
          const client = await pool.connect();
          await client.query('BEGIN');
          await client.query(insert, [key, 'order', 100]);
          await client.query(sql.markAndCommit(key, lease)!);
          client.release();
        }
      },
      async () => {
        for (let batch = 0; batch < NOTIFICATIONS; batch += 10) {
          const some = received.slice(batch, batch + 10);
          await receiveMany(
            some.map(({ key }) => key),
            some.map(({ lease }) => lease),
          );
        }
      },
    );
    run += 1;
    const store = new PostgresStore({ pool, table: TABLE });
    await costOf('receive alone, then an exactly-once delivery (one ledger insert)', async () => {
      for (let index = 0; index < NOTIFICATIONS; index += 1) {
        const key = `C${run}.${index}:SUCCESSFUL`;
        const lease = { id: randomUUID(), ms: 60_000 };
        await store.receive(key, JSON.parse(record) as Record<string, unknown>, lease);
        const tx = (await store.begin(key, lease.id))!;
        await tx.tx.query(insert, [key, 'order', 100]);
        await tx.commit();
      }
    });
    // Deliveries due together (receives batched by ten, as group commit makes them under load), each in a
    // transaction of its own.
    run += 1;
    await costOf('receives by 10, then 10 exactly-once deliveries, one transaction each', async () => {
      for (let batch = 0; batch < NOTIFICATIONS / 10; batch += 1) {
        const keys = keysOf(10, batch);
        const leases = keys.map(() => randomUUID());
        await receiveMany(keys, leases);
        await Promise.all(
          keys.map(async (key, index) => {
            const tx = (await store.begin(key, leases[index]!))!;
            await tx.tx.query(insert, [key, 'order', 100]);
            if ((await tx.commit()) !== 'delivered') throw new Error(`${key} was not delivered`);
          }),
        );
      }
    });
  } finally {
    await pool.end();
    await service.cleanup();
  }
}

void main();
