/**
 * A partner app crediting its ledger through an ORM (the fixture at `FIXTURE`, opened on `SCHEMA`), at
 * least once on PostgreSQL; with `CRASH=1` it kills itself (SIGKILL) right after its first credit, before
 * the delivery's commit. Sends `{ url }` over IPC once it listens. For test/helpers/orm-scenarios.ts.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool } from 'pg';
import { ipnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import type { OrmFixture } from '../helpers/orm-scenarios.js';

async function main(): Promise<void> {
  const { fixture } = (await import(process.env.FIXTURE!)) as { fixture: OrmFixture<unknown> };
  const schema = process.env.SCHEMA!;
  const orm = await fixture.open(schema);
  const pool = new Pool({ connectionString: process.env.DATABASE_URL, options: `-c search_path=${schema}` });
  pool.on('error', () => {});
  const ipn = ipnRouter({
    store: new PostgresStore({ pool, transactions: orm.transactions }),
    delivery: 'at-least-once',
    // Room for an ORM's first transaction in a process just started on a loaded machine (Prisma's takes
    // over a second there): a shorter lease abandoned the attempt before its listener began, again and again.
    leaseMs: 4_000,
    // An attempt that still runs out of time is retried at once, not after the default back-off.
    retryDelayMs: 50,
    recoveryIntervalMs: 100,
    logger: { debug() {}, info() {}, warn() {}, error() {} },
  });
  ipn.on('successful', async (n, { tx }) => {
    await orm.credit(tx, n);
    if (process.env.CRASH === '1') process.kill(process.pid, 'SIGKILL');
  });
  const server = createServer(ipn).listen(0, '127.0.0.1', () => {
    process.send?.({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` });
  });
}

void main();
