/**
 * The end-to-end comparison (issue 34), run by `npm run bench` after the per-request variants: N
 * notifications sent with a fixed number in flight, timed from the first request to the last ledger row
 * committed, then each ledger checked for exactly one row per payment. ipn-kit exactly once against the
 * minimal hand-written handler, the handler written by the service's own book and a job queue
 * (graphile-worker). The variants run interleaved, round after round, as the per-request ones do.
 */
import { join } from 'node:path';
import { Pool } from 'pg';
import { ended, receive, start, tell } from './children.js';
import type { EndToEndLoadConfig, EndToEndLoadResult } from './e2e-load.js';
import type { BenchService } from './services.js';
import type { TargetCheck } from './summary.js';
import type { ServerConfig, ServerStats } from './variants.js';

/** The end-to-end variants, in the order each round runs them. */
export const E2E_VARIANTS = ['minimal', 'by-the-book', 'exactly-once', 'graphile-worker'] as const;
export type EndToEndVariant = (typeof E2E_VARIANTS)[number];

/**
 * What each is: its server in bench/server.ts, the ledger it credits (`handwritten`: keyed by
 * (transaction_id, state), written idempotently; `ledger`: no key, as the docs' exactly-once listener has
 * it), and what else is checked after the run.
 */
const INFO: Record<
  EndToEndVariant,
  {
    label: string;
    server: ServerConfig['variant'];
    ledger: 'handwritten' | 'ledger';
    inbox?: true;
    audit?: true;
  }
> = {
  minimal: {
    label: 'Express 5 + express.json(), INSERT INTO ledger ... ON CONFLICT DO NOTHING, then 200',
    server: 'handwritten-ledger',
    ledger: 'handwritten',
  },
  'by-the-book': {
    label: "the service's book: BEGIN, the payload into an audit table, the credit, COMMIT, then 200",
    server: 'by-the-book',
    ledger: 'handwritten',
    audit: true,
  },
  'exactly-once': {
    label:
      "ipnRouter(), PostgresStore, at-least-once, the listener's ledger INSERT through db (exactly once)",
    server: 'postgres-ledger',
    ledger: 'ledger',
    inbox: true,
  },
  'graphile-worker': {
    label: 'graphile-worker 0.17: the handler add_job()s, then 200; concurrency 10 credits as minimal does',
    server: 'graphile-worker',
    ledger: 'handwritten',
  },
};

/** What a ledger (and the inbox or the audit table) held once the server had stopped. */
export interface LedgerCheck {
  /** Rows in the ledger. */
  rows: number;
  /** Distinct transaction ids among them. */
  payments: number;
  /** Rows whose transaction id is one this measurement sent. */
  ours: number;
  /** The inbox's entries by status (ipn-kit's variants). */
  inbox?: Record<string, number>;
  /** Distinct transaction ids in the audit table (by-the-book). */
  audited?: number;
  /** Exactly one ledger row per payment sent, and nothing else (every inbox entry delivered, every payload kept). */
  ok: boolean;
}

/** One variant in one round. */
export interface EndToEndMeasurement {
  round: number;
  /** From the first request to the poll that found the last ledger row. */
  seconds?: number;
  /** Notifications credited per second: the count over `seconds`. */
  rate?: number;
  load?: EndToEndLoadResult;
  /** CPU time of the server process (listening to stopping), of PostgreSQL ('go' to the last row). */
  serverCpuMicros?: number;
  serviceCpuMicros?: number;
  stats?: ServerStats;
  ledger?: LedgerCheck;
  error?: string;
}

export interface EndToEndRun {
  variant: EndToEndVariant;
  label: string;
  rounds: EndToEndMeasurement[];
}

export interface EndToEndResult {
  count: number;
  concurrency: number;
  runs: EndToEndRun[];
  targets: TargetCheck[];
}

/** What the run gives the comparison: the PostgreSQL service and table, and the servers' configuration. */
export interface EndToEndContext {
  count: number;
  concurrency: number;
  rounds: number;
  service: BenchService;
  server: Omit<ServerConfig, 'variant'>;
  runTag: string;
  /** True once the run was interrupted: the comparison stops after the measurement under way. */
  interrupted: () => boolean;
  /** Where to write a `--cpu-prof` profile of each server process (`<dir>/e2e-<variant>-round<N>/`), if anywhere. */
  cpuProf?: string;
  /** Called with each measurement's progress line. */
  log: (line: string) => void;
}

const errorText = (error: unknown): string => (error instanceof Error ? error.message : String(error));
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** How often the ledger is counted once the load is done, in milliseconds: the timing's resolution. */
const POLL_MS = 10;

/** The ledger table a variant credits. */
const ledgerOf = (table: string, variant: EndToEndVariant): string => `"${table}_${INFO[variant].ledger}"`;

async function countRows(db: Pool, ledger: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${ledger}`);
  return rows[0]!.n;
}

/** The ledger (and inbox or audit table) after the server stopped: a late or second write is in it by then. */
async function checkLedger(
  db: Pool,
  table: string,
  variant: EndToEndVariant,
  prefix: string,
  count: number,
): Promise<LedgerCheck> {
  const { rows } = await db.query<{ rows: number; payments: number; ours: number }>(
    'SELECT count(*)::int AS rows, count(DISTINCT transaction_id)::int AS payments, ' +
      `count(*) FILTER (WHERE starts_with(transaction_id, $1))::int AS ours FROM ${ledgerOf(table, variant)}`,
    [prefix],
  );
  const found = rows[0]!;
  const check: LedgerCheck = {
    ...found,
    ok: found.rows === count && found.payments === count && found.ours === count,
  };
  if (INFO[variant].inbox) {
    const { rows: statuses } = await db.query<{ status: string; n: number }>(
      `SELECT status, count(*)::int AS n FROM "${table}" GROUP BY status`,
    );
    check.inbox = Object.fromEntries(statuses.map(({ status, n }) => [status, n]));
    check.ok &&= check.inbox.delivered === count && statuses.length === 1;
  }
  if (INFO[variant].audit) {
    const { rows: audited } = await db.query<{ n: number }>(
      `SELECT count(DISTINCT transaction_id)::int AS n FROM "${table}_payloads"`,
    );
    check.audited = audited[0]!.n;
    check.ok &&= check.audited === count;
  }
  return check;
}

/**
 * One measurement: a fresh server and load generator; the load sends `count` notifications; the clock
 * stops at the poll that finds the ledger full; the server stops (its deliveries settle); the ledger is
 * checked.
 */
async function measure(
  context: EndToEndContext,
  db: Pool,
  variant: EndToEndVariant,
  round: number,
): Promise<EndToEndMeasurement> {
  const { count, service, server: serverConfig } = context;
  const prefix = `BE.${context.runTag}.${round}.${E2E_VARIANTS.indexOf(variant)}.`;
  const ledger = ledgerOf(serverConfig.table, variant);
  const children = [];
  try {
    await service.reset();
    const config: ServerConfig = { ...serverConfig, variant: INFO[variant].server };
    const profile = context.cpuProf
      ? ['--cpu-prof', `--cpu-prof-dir=${join(context.cpuProf, `e2e-${variant}-round${round}`)}`]
      : [];
    const server = start('server.ts', { BENCH_SERVER: JSON.stringify(config) }, profile);
    children.push(server);
    const { port } = await receive<{ port: number }>(server, 'ready', 60_000);
    const loadConfig: EndToEndLoadConfig = {
      url: `http://127.0.0.1:${port}/ipn`,
      count,
      concurrency: context.concurrency,
      idPrefix: prefix,
    };
    const loader = start('e2e-load.ts', { BENCH_E2E_LOAD: JSON.stringify(loadConfig) });
    children.push(loader);
    await receive(loader, 'ready', 30_000);
    // Generous: a loaded machine, a slow variant; a ledger that never fills fails here with its count.
    const limitMs = 60_000 + count * 20;
    const serviceBefore = await service.cpuMicros();
    const begun = performance.now();
    tell(loader, 'go');
    const { result: load } = await receive<{ result: EndToEndLoadResult }>(loader, 'result', limitMs);
    // No row can be missing before the last 2xx is in for the hand-written handlers, and ipn-kit's and the
    // queue's credits come after their 200s: counting only from here takes nothing from anyone's time.
    let rows = await countRows(db, ledger);
    while (rows < count && performance.now() - begun < limitMs) {
      await sleep(POLL_MS);
      rows = await countRows(db, ledger);
    }
    const seconds = (performance.now() - begun) / 1000;
    const serviceAfter = await service.cpuMicros();
    if (rows < count)
      throw new Error(`the ledger held ${rows} of ${count} rows after ${seconds.toFixed(0)} s`);
    tell(server, 'stop');
    const { stats } = await receive<{ stats: ServerStats }>(server, 'stats', 10_000);
    await ended(server, 15_000);
    const check = await checkLedger(db, serverConfig.table, variant, prefix, count);
    const measurement: EndToEndMeasurement = {
      round,
      seconds,
      rate: count / seconds,
      load,
      serverCpuMicros: stats.cpuMicros,
      serviceCpuMicros:
        serviceBefore === undefined || serviceAfter === undefined ? undefined : serviceAfter - serviceBefore,
      stats,
      ledger: check,
    };
    if (!check.ok) measurement.error = `the ledger is wrong: ${JSON.stringify(check)}`;
    return measurement;
  } catch (error) {
    return { round, error: errorText(error) };
  } finally {
    for (const child of children) await ended(child, 1_000);
  }
}

const mean = (values: number[]): number => values.reduce((sum, value) => sum + value, 0) / values.length;

/** The mean over rounds of `run`'s rate over `reference`'s in the same round, or null without a common round. */
function meanRatio(run: EndToEndRun | undefined, reference: EndToEndRun | undefined): number | null {
  const ratios = (run?.rounds ?? []).flatMap(({ round, rate, error }) => {
    const base = reference?.rounds.find((measurement) => measurement.round === round);
    return rate && !error && base?.rate && !base.error ? [rate / base.rate] : [];
  });
  return ratios.length > 0 ? mean(ratios) : null;
}

/** Issue 34's end-to-end targets for exactly once. */
export function endToEndTargets(runs: EndToEndRun[]): TargetCheck[] {
  const find = (variant: EndToEndVariant) => runs.find((run) => run.variant === variant);
  const target = (variant: EndToEndVariant, reference: EndToEndVariant, minimum: number): TargetCheck => {
    const text = `end to end: ${variant} >= ${minimum.toFixed(1)}x ${reference}`;
    const ratio = meanRatio(find(variant), find(reference));
    if (ratio === null) return { target: text, status: 'SKIP', measured: 'not measured (no common round)' };
    return { target: text, status: ratio >= minimum ? 'PASS' : 'MISS', measured: `${ratio.toFixed(2)}x` };
  };
  return [
    target('exactly-once', 'by-the-book', 1.2),
    target('exactly-once', 'minimal', 1.0),
    target('exactly-once', 'graphile-worker', 3.0),
  ];
}

export const E2E_HEADER = [
  'variant',
  'credited/s',
  'vs minimal',
  'vs by-the-book',
  'vs graphile-worker',
  'resends',
  'p50 ms',
  'p99 ms',
  'server µs/n',
  'PostgreSQL µs/n',
  'load µs/n',
  'ledger',
  'credited/s per round',
];
export const E2E_RIGHT = [false, true, true, true, true, true, true, true, true, true, true, false, false];

/** One row per variant: means over its rounds without an error. */
export function endToEndRows(runs: EndToEndRun[]): string[][] {
  const find = (variant: EndToEndVariant) => runs.find((run) => run.variant === variant);
  return runs.map((run) => {
    const good = run.rounds.filter((measurement) => measurement.rate && !measurement.error);
    const perRound = run.rounds
      .map(({ rate, error }) => (error ? 'failed' : rate ? Math.round(rate).toLocaleString('en-US') : '-'))
      .join(' / ');
    const name = `${run.variant}: ${run.label}`;
    const failures = run.rounds.flatMap(({ round, error }) => (error ? [`round ${round}: ${error}`] : []));
    if (good.length === 0)
      return [name, 'failed', '', '', '', '', '', '', '', '', '', failures.join('; '), perRound];
    const ratio = (reference: EndToEndVariant): string => {
      const value = run.variant === reference ? null : meanRatio(run, find(reference));
      return value === null ? '-' : `${value.toFixed(2)}x`;
    };
    const per = (pick: (m: EndToEndMeasurement) => number | undefined): string => {
      const values = good.flatMap((m) => {
        const value = pick(m);
        return value === undefined ? [] : [value / (m.load!.accepted + m.load!.resends)];
      });
      return values.length > 0 ? mean(values).toFixed(0) : '-';
    };
    return [
      name,
      Math.round(mean(good.map((m) => m.rate!))).toLocaleString('en-US'),
      ratio('minimal'),
      ratio('by-the-book'),
      ratio('graphile-worker'),
      String(good.reduce((sum, m) => sum + m.load!.resends, 0)),
      mean(good.map((m) => m.load!.p50)).toFixed(2),
      mean(good.map((m) => m.load!.p99)).toFixed(2),
      per((m) => m.serverCpuMicros),
      per((m) => m.serviceCpuMicros),
      per((m) => m.load!.cpuMicros),
      failures.length > 0 ? failures.join('; ') : 'one row per payment',
      perRound,
    ];
  });
}

/** Runs the comparison: `rounds` rounds, each running every variant once, in order. */
export async function runEndToEnd(context: EndToEndContext): Promise<EndToEndResult> {
  const runs: EndToEndRun[] = E2E_VARIANTS.map((variant) => ({
    variant,
    label: INFO[variant].label,
    rounds: [],
  }));
  const db = new Pool({ connectionString: context.server.databaseUrl, max: 1 });
  db.on('error', () => {
    // An idle connection dropped: the next query reports it.
  });
  try {
    for (let round = 1; round <= context.rounds; round += 1) {
      for (const run of runs) {
        const measurement = await measure(context, db, run.variant, round);
        if (context.interrupted())
          return { count: context.count, concurrency: context.concurrency, runs, targets: [] };
        run.rounds.push(measurement);
        context.log(progress(run.variant, round, context, measurement));
      }
    }
  } finally {
    await db.end().catch(() => {});
  }
  return { count: context.count, concurrency: context.concurrency, runs, targets: endToEndTargets(runs) };
}

function progress(
  variant: EndToEndVariant,
  round: number,
  context: EndToEndContext,
  measurement: EndToEndMeasurement,
): string {
  const where = `e2e round ${round}/${context.rounds}  ${variant.padEnd(20)}`;
  const { rate, seconds, load, error } = measurement;
  if (error || !rate || !load) return `${where}  FAILED: ${error ?? 'no numbers'}`;
  const served = load.accepted + load.resends;
  const cpu = (micros: number | undefined): string =>
    micros === undefined ? '-' : (micros / served).toFixed(0);
  return (
    `${where}  ${Math.round(rate).toLocaleString('en-US').padStart(6)} credited/s  ${seconds!.toFixed(2)} s  ` +
    `resends ${load.resends}  p50 ${load.p50.toFixed(2)} ms  CPU ${cpu(measurement.serverCpuMicros)} µs/n ` +
    `(+ ${cpu(measurement.serviceCpuMicros)} in PostgreSQL)  ledger ok`
  );
}
