/**
 * What the ORM path's restore of a listener's session settings costs a delivery: `npx tsx
 * bench/session-restore-cost.ts`. The ORM path's transaction, statement by statement as an ORM sends them on
 * one `pg` client (`BEGIN`, the opening, the listener's insert, `RESET ALL`, the `delivered` mark, `COMMIT`),
 * in three forms run in turns: what `PostgresStore` sends with `sessionSettings: 'restore'` (the default: the
 * session's settings read at the opening, reset before the mark and set back by it) and with `'reset'` (only
 * the authorization and role read and set back), and without any of it (no reading, no `RESET ALL`). For
 * each: the CPU of this connection's own PostgreSQL backend (from /proc: other work on the server is not
 * counted, so it needs PostgreSQL on this machine) and the time per delivery, as this client waits for it. No
 * listener here sets anything: the cost is the reading and the round trip of `RESET ALL`, paid by every ORM
 * delivery. Uses DATABASE_URL and tables of its own, dropped at the end.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Pool, type PoolClient } from 'pg';
import { PostgresStore } from '../lib/postgres.js';
import { inboxSql, receivesJson, RESET } from '../lib/stores/postgres/postgres-sql.js';
import { bodyFor } from './payload.js';
import { databaseUrl } from './variants.js';

const TABLE = `ipn_restore_cost_${process.pid}`;
const DELIVERIES = 1_000; // per form and round
const ROUNDS = 3; // each form first, second and last once

/** The CPU a process has used, in µs (user and system, from /proc; `undefined` when it cannot be read). */
function cpuMicros(pid: number): number | undefined {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1e6) / 100; // clock ticks of 10 ms
  } catch {
    return undefined;
  }
}

async function main(): Promise<void> {
  const pool = new Pool({ connectionString: databaseUrl(), max: 1 });
  await new PostgresStore({ pool, table: TABLE }).migrate();
  const client: PoolClient = await pool.connect();
  try {
    await client.query(
      `CREATE TABLE "${TABLE}_ledger" (transaction_id text PRIMARY KEY, order_id text, amount numeric)`,
    );
    const { rows: backend } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const pid = backend[0]!.pid;
    if (cpuMicros(pid) === undefined) {
      console.log('session-restore-cost: PostgreSQL does not run on this machine: its CPU cannot be read');
      return;
    }
    const sql = inboxSql(TABLE);
    const insert = `INSERT INTO "${TABLE}_ledger" (transaction_id, order_id, amount) VALUES ($1, $2, $3)`;
    const record = bodyFor()('PIX_22827809');
    const { rows: opened } = await client.query<{ schema: string | null }>(sql.ormOpening());
    const mark = sql.deliveredInOrm(opened[0]!.schema);
    // What PostgresStore sends through an ORM, by `sessionSettings`; and the same statements with the
    // settings' read, reset and restore cut out.
    const forms = {
      without: {
        opening: 'SELECT txid_current()::text AS xid',
        reset: undefined,
        mark: mark
          .replace(/,\s*restored AS \([\s\S]*\) AS changed\s*\)/, '')
          .replace(/, \(SELECT settings FROM restored\) AS restored/, ''),
      },
      restore: { opening: sql.ormOpening(true), reset: RESET as string | undefined, mark },
      reset: { opening: sql.ormOpening(false), reset: RESET as string | undefined, mark },
    };
    type Form = keyof typeof forms;
    const names = Object.keys(forms) as Form[];
    const spent = Object.fromEntries(names.map((how) => [how, { cpu: 0, ms: 0 }])) as Record<
      Form,
      { cpu: number; ms: number }
    >;
    let run = 0;
    const deliver = async (how: Form, measured: boolean): Promise<void> => {
      run += 1;
      const count = measured ? DELIVERIES : 100;
      const leased = Array.from({ length: count }, (_, index) => ({
        key: `R${run}.${index}:SUCCESSFUL`,
        lease: randomUUID(),
      }));
      for (let batch = 0; batch < count; batch += 10) {
        const some = leased.slice(batch, batch + 10);
        const receives = some.map(({ key, lease }) => [
          key,
          key.split(':')[0],
          'SUCCESSFUL',
          record,
          lease,
          60_000,
        ]);
        await client.query(sql.receiveMany, [receivesJson(receives)]);
      }
      const { opening, reset, mark: marking } = forms[how];
      const cpuBefore = cpuMicros(pid)!;
      const started = process.hrtime.bigint();
      for (const { key, lease } of leased) {
        await client.query('BEGIN');
        const { rows } = await client.query<{ xid: string; settings?: string }>(opening);
        await client.query(insert, [key, 'order', 100]);
        if (reset !== undefined) await client.query(reset);
        const values = [key, lease, rows[0]!.xid, ...(how === 'without' ? [] : [rows[0]!.settings])];
        const marked = await client.query<{ marked: number }>(marking, values);
        if (marked.rows[0]?.marked !== 1) throw new Error(`${key} was not marked`);
        await client.query('COMMIT');
      }
      if (!measured) return;
      spent[how].ms += Number(process.hrtime.bigint() - started) / 1e6;
      spent[how].cpu += cpuMicros(pid)! - cpuBefore;
    };
    for (const how of names) await deliver(how, false); // warm-up: plans cached, pages read
    for (let round = 0; round < ROUNDS; round += 1) {
      // Each form first, second and last in turn.
      for (let turn = 0; turn < names.length; turn += 1)
        await deliver(names[(round + turn) % names.length]!, true);
    }
    const per = (how: Form) => ({
      cpu: spent[how].cpu / (DELIVERIES * ROUNDS),
      wall: (spent[how].ms * 1000) / (DELIVERIES * ROUNDS),
    });
    const label = {
      without: "without the settings' reset",
      restore: "sessionSettings 'restore'",
      reset: "sessionSettings 'reset'  ",
    };
    for (const how of names) {
      const { cpu, wall } = per(how);
      console.log(
        `ORM path's transaction, ${label[how]}: its backend's CPU ` +
          `${cpu.toFixed(0).padStart(4)} µs, ${wall.toFixed(0).padStart(5)} µs per delivery as the client waits`,
      );
    }
    for (const how of ['restore', 'reset'] as const) {
      const cpu = per(how).cpu - per('without').cpu;
      const wall = per(how).wall - per('without').wall;
      console.log(
        `${label[how].trim()}: +${cpu.toFixed(0)} µs of the backend's CPU, +${wall.toFixed(0)} µs per delivery`,
      );
    }
  } finally {
    await client
      .query(`DROP TABLE IF EXISTS "${TABLE}", "${TABLE}_expected", "${TABLE}_states", "${TABLE}_ledger"`)
      .catch(() => {});
    client.release();
    await pool.end();
  }
}

void main();
