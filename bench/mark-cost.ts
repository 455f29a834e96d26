/**
 * What the exactly-once path's `delivered` mark costs PostgreSQL, and whether it is a HOT update, under
 * other forms of the schema (issue 34): `npx tsx bench/mark-cost.ts [notifications] [rounds]`. Each form is
 * a table of its own, filled and delivered as under load: receives by ten (one statement, as group commit
 * sends them), then each delivery in its own transaction (`BEGIN`, one ledger insert, the mark with the
 * `COMMIT`), the forms interleaved round after round. The figure is the CPU of this connection's backend
 * (from /proc: PostgreSQL must run on this machine), so other sessions' queries do not count in it; the
 * HOT share is PostgreSQL's own count (`pg_stat_user_tables`). Nothing here changes the store: the forms
 * are tables made for the measurement, dropped at the end.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Client } from 'pg';
import { postgresSchemaSql } from '../lib/postgres.js';
import { inboxSql, receivesJson } from '../lib/stores/postgres/postgres-sql.js';
import { bodyFor } from './payload.js';
import { databaseUrl } from './variants.js';

const NOTIFICATIONS = Number(process.argv[2] ?? 500);
const ROUNDS = Number(process.argv[3] ?? 9);
const PREFIX = `ipn_mark_${process.pid}`;

/** The mark as today's exactly-once path sends it, with the COMMIT: a DO block that raises on a lost lease. */
const doMark = (table: string, key: string, lease: string): string =>
  inboxSql(table).markAndCommit(key, lease, false)!;

/** A form of the schema and of the mark. */
interface Form {
  name: string;
  /** DDL after the table's: its own indexes, its fillfactor. */
  ddl: (table: string) => string;
  /** The statement(s) sent after the ledger insert, COMMIT included, as one simple query. */
  mark: (table: string, key: string, lease: string) => string;
}

const DUE_INDEX = (table: string): string => `"${table.slice(0, 63 - '_due_idx'.length)}_due_idx"`;
const plainUpdate = (table: string, key: string, lease: string): string =>
  `UPDATE "${table}" SET status = 'delivered', delivered_at = now(), lease_id = NULL, lease_until = NULL, ` +
  `updated_at = now() WHERE key = '${key}' AND lease_id = '${lease}'; COMMIT`;

/** The DO block's body as a function of the table's, created once: its plan is kept by the session. */
const markFunction = (table: string): string =>
  `DROP FUNCTION IF EXISTS "${table}_mark"(text, text); CREATE FUNCTION "${table}_mark"(k text, l text) RETURNS void LANGUAGE plpgsql AS $f$ BEGIN ` +
  `UPDATE "${table}" SET status = 'delivered', delivered_at = now(), lease_id = NULL, lease_until = NULL, ` +
  "updated_at = now() WHERE key = k AND lease_id = l; IF NOT FOUND THEN RAISE EXCEPTION 'lost' " +
  "USING ERRCODE = 'IK001'; END IF; END $f$";

const FORMS: Form[] = [
  {
    name: 'no mark: BEGIN, the ledger insert, COMMIT (the floor)',
    ddl: () => '',
    mark: () => 'COMMIT',
  },
  { name: "today's: due index (status, next_attempt_at), the DO-block mark", ddl: () => '', mark: doMark },
  { name: "today's index, the same UPDATE without the DO block", ddl: () => '', mark: plainUpdate },
  {
    name: "today's index, the UPDATE in a CTE that fails by a cast (no DO block)",
    ddl: () => '',
    mark: (table, key, lease) =>
      `WITH marked AS (UPDATE "${table}" SET status = 'delivered', delivered_at = now(), lease_id = NULL, ` +
      `lease_until = NULL, updated_at = now() WHERE key = '${key}' AND lease_id = '${lease}' RETURNING 1) ` +
      `SELECT CASE WHEN n = 1 THEN NULL ELSE ('ipn-kit: the lease on ${key} was lost: ' || n)::int END ` +
      'FROM (SELECT count(*) AS n FROM marked) AS counted; COMMIT',
  },
  {
    name: "today's index, the DO block's body as a PL/pgSQL function made once",
    ddl: markFunction,
    mark: (table, key, lease) => `SELECT "${table}_mark"('${key}', '${lease}'); COMMIT`,
  },
  {
    name: "today's index, fillfactor 70",
    ddl: (table) => `ALTER TABLE "${table}" SET (fillfactor = 70)`,
    mark: doMark,
  },
  {
    name: "due index (next_attempt_at) WHERE status <> 'delivered', fillfactor 70",
    ddl: (table) =>
      `DROP INDEX ${DUE_INDEX(table)}; ALTER TABLE "${table}" SET (fillfactor = 70); ` +
      `CREATE INDEX ON "${table}" (next_attempt_at) WHERE status <> 'delivered'`,
    mark: doMark,
  },
  {
    name: 'no index on status at all (due index dropped), fillfactor 70',
    ddl: (table) => `DROP INDEX ${DUE_INDEX(table)}; ALTER TABLE "${table}" SET (fillfactor = 70)`,
    mark: doMark,
  },
  {
    name: 'no index on status at all, fillfactor 100 (the default)',
    ddl: (table) => `DROP INDEX ${DUE_INDEX(table)}`,
    mark: doMark,
  },
  {
    name: 'no index on status at all, fillfactor 100, the PL/pgSQL function',
    ddl: (table) => `DROP INDEX ${DUE_INDEX(table)}; ${markFunction(table)}`,
    mark: (table, key, lease) => `SELECT "${table}_mark"('${key}', '${lease}'); COMMIT`,
  },
  {
    name: 'the mark as an insert into a table of marks (key primary key)',
    ddl: (table) =>
      `CREATE TABLE "${table}_marks" (key text PRIMARY KEY, delivered_at timestamptz DEFAULT now())`,
    mark: (table, key) => `INSERT INTO "${table}_marks" (key) VALUES ('${key}'); COMMIT`,
  },
];

/**
 * This backend's CPU time in microseconds: the scheduler's count in /proc/PID/schedstat, in nanoseconds
 * (/proc/PID/stat's counts are in ticks of 10 ms, too coarse for a few hundred notifications).
 */
function backendCpu(pid: number): number {
  return Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]) / 1000;
}

async function main(): Promise<void> {
  const db = new Client({ connectionString: databaseUrl() });
  await db.connect();
  const { rows } = await db.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  const pid = rows[0]!.pid;
  try {
    readFileSync(`/proc/${pid}/schedstat`);
  } catch {
    console.log('mark-cost: PostgreSQL does not run on this machine: its CPU cannot be read');
    await db.end();
    return;
  }
  const record = bodyFor()('PIX_22827809');
  const tables = FORMS.map((_, index) => `${PREFIX}_${index}`);
  const spent = FORMS.map(() => [] as number[]);
  try {
    for (const [index, form] of FORMS.entries()) {
      const table = tables[index]!;
      await db.query(postgresSchemaSql(table));
      const extra = form.ddl(table);
      if (extra) await db.query(extra);
      await db.query(
        `CREATE TABLE "${table}_ledger" (transaction_id text NOT NULL, order_id text, amount numeric)`,
      );
    }
    // The forms take turns batch by batch (ten notifications each), so that the machine's other work, which
    // comes and goes, lands on all of them alike; a round's figure is the sum of its batches.
    for (let round = 1; round <= ROUNDS; round += 1) {
      const sums = FORMS.map(() => 0);
      for (let batch = 0; batch < NOTIFICATIONS / 10; batch += 1) {
        for (const [index, form] of FORMS.entries()) {
          const table = tables[index]!;
          const sql = inboxSql(table);
          const insert = `INSERT INTO "${table}_ledger" (transaction_id, order_id, amount) VALUES ($1, $2, $3)`;
          const keys = Array.from({ length: 10 }, (_, n) => `M${round}.${batch}.${n}:SUCCESSFUL`);
          const leases = keys.map(() => randomUUID());
          const before = backendCpu(pid);
          await db.query(sql.receiveMany, [
            receivesJson(
              keys.map((key, n) => [key, key.split(':')[0]!, 'SUCCESSFUL', record, leases[n]!, 60_000]),
            ),
          ]);
          for (const [n, key] of keys.entries()) {
            await db.query('BEGIN');
            await db.query(insert, [key, 'order', 100]);
            await db.query(form.mark(table, key, leases[n]!));
          }
          sums[index]! += backendCpu(pid) - before;
        }
      }
      for (const [index, sum] of sums.entries()) spent[index]!.push(sum / NOTIFICATIONS);
    }
    // This backend's counters reach the shared statistics at its next transaction's end.
    await db.query('SELECT pg_stat_force_next_flush()');
    await db.query('SELECT 1');
    const median = (values: number[]): number =>
      [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
    const floor = median(spent[0]!);
    console.log(
      `mark-cost: ${ROUNDS} rounds of ${NOTIFICATIONS} notifications per form; PostgreSQL backend CPU per ` +
        'notification (receive by ten, BEGIN, ledger insert, mark + COMMIT), median over rounds\n',
    );
    for (const [index, form] of FORMS.entries()) {
      const table = tables[index]!;
      const { rows: stat } = await db.query<{ upd: string; hot: string; heap: string; indexes: string }>(
        `SELECT n_tup_upd AS upd, n_tup_hot_upd AS hot, pg_relation_size(relid) AS heap,
           pg_indexes_size(relid) AS indexes FROM pg_stat_user_tables WHERE relid = $1::regclass`,
        [`"${table}"`],
      );
      const { upd, hot, heap, indexes } = stat[0]!;
      const cost = median(spent[index]!);
      const hotShare =
        Number(upd) > 0 ? `${((100 * Number(hot)) / Number(upd)).toFixed(0)}% HOT` : 'no update';
      const sorted = [...spent[index]!].sort((a, b) => a - b);
      const quartile = (q: number): string => sorted[Math.floor(q * (sorted.length - 1))]!.toFixed(0);
      console.log(
        `${form.name.padEnd(78)} ${cost.toFixed(0).padStart(5)} µs (mark ${(cost - floor).toFixed(0).padStart(4)}; ` +
          `quartiles ${quartile(0.25)}-${quartile(0.75)})  ${hotShare.padEnd(9)} heap ` +
          `${(Number(heap) / 2 ** 20).toFixed(1)} MiB, indexes ${(Number(indexes) / 2 ** 20).toFixed(1)} MiB`,
      );
    }
  } finally {
    for (const table of tables) {
      await db
        .query(
          `DROP TABLE IF EXISTS "${table}", "${table}_expected", "${table}_states", "${table}_audit", ` +
            `"${table}_ledger", "${table}_marks"; DROP FUNCTION IF EXISTS "${table}_mark"`,
        )
        .catch(() => {});
    }
    await db.end();
  }
}

void main();
