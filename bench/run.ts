/**
 * `npm run bench`: throughput and latency of the router's variants against a bare Express app, measured in
 * interleaved rounds, then the MemoryStore's heap and claim cost. Each server runs in a child process and is
 * driven by autocannon from another child process. See bench/README.md.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ended, killAll, receive, start, tell } from './children.js';
import type { LoadConfig, LoadResult } from './load.js';
import { describeMachine, LOAD_AT_START } from './machine.js';
import type { MemoryResult } from './memory.js';
import { stagesTable, stageVerdict, type StageResult, type StageSettings } from './stage-table.js';
import { openMysql, openPostgres, openRedis, openSqlite, type BenchService } from './services.js';
import { readSettings, USAGE, type Settings } from './settings.js';
import { aggregate, checkTargets, type Aggregate, type Measurement, type VariantRun } from './summary.js';
import { markdownTable, memoryLines, readmeSection, rows, targetLines, textTable } from './tables.js';
import {
  databaseUrl,
  mysqlUrl,
  redisUrl,
  VARIANT_INFO,
  VARIANTS,
  type ServerConfig,
  type ServerStats,
  type ServiceName,
  type Variant,
} from './variants.js';
import { buildLib } from './build-lib.js';
import { E2E_HEADER, E2E_RIGHT, endToEndRows, runEndToEnd, type EndToEndResult } from './e2e.js';
import { rewriteSection, writeJson } from './write-results.js';

const RUN_TAG = Date.now().toString(36);
const PREFIX = `ipn-kit-bench:${process.pid}-${RUN_TAG}:`;
const TABLE = `ipn_bench_${process.pid}_${RUN_TAG}`;

/** The services of this run, each opened once for every variant that needs it, cleaned up however the run ends. */
const services = new Map<ServiceName, BenchService>();
/** The run's SQLite file, once that service is open. */
let sqliteFile = '';
/** The run's build of lib/, once made. */
let built: { dir: string; remove(): Promise<void> } | undefined;

let cleaning: Promise<void> | undefined;
/** Kills the children, deletes the run's keys, drops its tables and removes its SQLite folder. Idempotent. */
function cleanup(): Promise<void> {
  killAll();
  cleaning ??= Promise.all([
    ...[...services.values()].map((service) => service.cleanup()),
    built?.remove(),
  ]).then(() => {});
  return cleaning;
}

const errorText = (error: unknown): string => (error instanceof Error ? error.message : String(error));
const hostOf = (url: string): string => {
  try {
    return new URL(url).host;
  } catch {
    return '(an unparsable URL)';
  }
};

/** Where each network service is found, and the variable that says so. */
const SERVICE_URLS: Record<Exclude<ServiceName, 'SQLite'>, { url: () => string; variable: string }> = {
  Redis: { url: redisUrl, variable: 'REDIS_URL' },
  PostgreSQL: { url: databaseUrl, variable: 'DATABASE_URL' },
  MariaDB: { url: mysqlUrl, variable: 'MYSQL_URL' },
};

/** Opens the service `name` for this run. */
async function openService(name: ServiceName): Promise<BenchService> {
  switch (name) {
    case 'Redis':
      return openRedis(redisUrl(), PREFIX);
    case 'PostgreSQL':
      return openPostgres(databaseUrl(), TABLE);
    case 'MariaDB':
      return openMysql(mysqlUrl(), TABLE);
    case 'SQLite': {
      const sqlite = await openSqlite(TABLE);
      sqliteFile = sqlite.file;
      return sqlite;
    }
  }
}

/** Connects the services the selected variants need; a variant whose service is unreachable is skipped. */
async function openServices(runs: VariantRun[]): Promise<void> {
  const failures = new Map<ServiceName, string>();
  for (const run of runs) {
    const needs = VARIANT_INFO[run.variant].needs;
    if (!needs || services.has(needs)) continue;
    if (!failures.has(needs)) {
      try {
        services.set(needs, await openService(needs));
        continue;
      } catch (error) {
        if (needs === 'SQLite') {
          failures.set(needs, `SQLite could not be opened (${errorText(error)})`);
        } else {
          const { url, variable } = SERVICE_URLS[needs];
          failures.set(
            needs,
            `${needs} at ${hostOf(url())} is unreachable (${errorText(error)}); set ${variable}`,
          );
        }
      }
    }
    run.skipped = failures.get(needs);
    console.warn(`bench: skipping ${run.variant}: ${run.skipped}`);
  }
}

/** What every server process of the run is told, but its variant: the services, the run's names, the build. */
function serverConfig(): Omit<ServerConfig, 'variant'> {
  return {
    redisUrl: redisUrl(),
    prefix: PREFIX,
    databaseUrl: databaseUrl(),
    table: TABLE,
    mysqlUrl: mysqlUrl(),
    sqliteFile,
    lib: built!.dir,
  };
}

/** One measurement: a fresh server process, a fresh load process, then both gone. */
async function measure(settings: Settings, variant: Variant, round: number): Promise<Measurement> {
  // A directory per process: with tsx, its loader thread writes a profile too, under a name of its own.
  const profile = settings.cpuProf
    ? ['--cpu-prof', `--cpu-prof-dir=${join(settings.cpuProf, `${variant}-round${round}`)}`]
    : [];
  const config: ServerConfig = { variant, ...serverConfig() };
  const children = [];
  try {
    const needs = VARIANT_INFO[variant].needs;
    const service = needs && services.get(needs);
    await service?.reset();
    const serviceBefore = await service?.cpuMicros();
    const server = start('server.ts', { BENCH_SERVER: JSON.stringify(config) }, profile);
    children.push(server);
    const { port } = await receive<{ port: number }>(server, 'ready', 30_000);
    const load: LoadConfig = {
      url: `http://127.0.0.1:${port}/ipn`,
      connections: settings.connections,
      duration: settings.duration,
      warmup: settings.warmup,
      idPrefix: `BN.${RUN_TAG}.${round}.${VARIANTS.indexOf(variant)}.`,
    };
    const loader = start('load.ts', { BENCH_LOAD: JSON.stringify(load) });
    children.push(loader);
    const limit = (settings.duration + settings.warmup) * 1000 + 30_000;
    const { result } = await receive<{ result: LoadResult }>(loader, 'result', limit);
    tell(server, 'stop');
    const { stats } = await receive<{ stats: ServerStats }>(server, 'stats', 10_000);
    await ended(server, 10_000);
    const serviceAfter = await service?.cpuMicros();
    const serviceCpuMicros =
      serviceBefore === undefined || serviceAfter === undefined ? undefined : serviceAfter - serviceBefore;
    return { round, result, stats, serviceCpuMicros };
  } catch (error) {
    return { round, error: errorText(error) };
  } finally {
    for (const child of children) await ended(child, 1_000);
  }
}

function progress(variant: Variant, round: number, settings: Settings, measurement: Measurement): string {
  const where = `round ${round}/${settings.rounds}  ${variant.padEnd(18)}`;
  const { result, stats, error } = measurement;
  if (!result) return `${where}  FAILED: ${error}`;
  let line = `${where}  ${Math.round(result.rps).toLocaleString('en-US').padStart(7)} req/s  p50 ${fixed(result.p50)} ms  p99 ${fixed(result.p99)} ms  non-2xx ${result.non2xx}`;
  const cpu = stats ? stats.cpuMicros / (result.responses + result.warmupResponses) : Number.NaN;
  line += `  CPU ${cpu.toFixed(0)} µs/req`;
  const served = result.responses + result.warmupResponses;
  if (measurement.serviceCpuMicros !== undefined) {
    line += ` (+ ${(measurement.serviceCpuMicros / served).toFixed(0)} in ${VARIANT_INFO[variant].needs})`;
  }
  // Every id is new: a duplicate or an invalid event would mean the load is not what it claims to be.
  const odd = stats && (stats.duplicate > 0 || stats.invalid > 0 || stats.error > 0);
  return odd ? `${line}  (events: ${JSON.stringify(stats)})` : line;
}

async function measureMemory(keys: number): Promise<MemoryResult | string> {
  if (keys === 0) return 'not asked for (--memory-keys 0)';
  const child = start('memory.ts', { BENCH_MEMORY_KEYS: String(keys) }, ['--expose-gc']);
  try {
    return (await receive<{ result: MemoryResult }>(child, 'memory', 300_000)).result;
  } catch (error) {
    return `failed: ${errorText(error)}`;
  } finally {
    await ended(child, 1_000);
  }
}

/**
 * bench/stages.ts in a process of its own (nothing else of the run's in its heap), after the servers: the
 * CPU of each stage and adapter against the raw server's, and its budget. `quick`: fewer, shorter rounds.
 */
async function measureStagesApart(
  quick: boolean,
): Promise<{ settings: StageSettings; results: StageResult[] } | string> {
  const child = start('stages.ts', quick ? { BENCH_STAGE_ROUNDS: '5', BENCH_STAGE_MS: '15' } : {});
  try {
    const { results, settings } = await receive<{ results: StageResult[]; settings: StageSettings }>(
      child,
      'stages',
      600_000,
    );
    return { settings, results };
  } catch (error) {
    return `failed: ${errorText(error)}`;
  } finally {
    await ended(child, 1_000);
  }
}

/**
 * The end-to-end comparison (bench/e2e.ts) on the run's PostgreSQL, opened here if no per-request variant
 * needed it; a reason instead when it was not asked for or PostgreSQL is unreachable.
 */
async function measureEndToEnd(
  settings: Settings,
  interrupted: () => boolean,
): Promise<EndToEndResult | string> {
  if (settings.e2e === 0) return 'not asked for (--e2e 0)';
  let service = services.get('PostgreSQL');
  if (!service) {
    try {
      service = await openService('PostgreSQL');
      services.set('PostgreSQL', service);
    } catch (error) {
      return `PostgreSQL at ${hostOf(databaseUrl())} is unreachable (${errorText(error)}); set DATABASE_URL`;
    }
  }
  return runEndToEnd({
    count: settings.e2e,
    concurrency: settings.e2eConcurrency,
    rounds: settings.rounds,
    service,
    server: serverConfig(),
    runTag: RUN_TAG,
    cpuProf: settings.cpuProf,
    interrupted,
    log: (line) => console.log(line),
  });
}

/** The end-to-end table and what it measured, for the terminal (`text`) or bench/README.md. */
function endToEndSection(e2e: EndToEndResult | string, settings: Settings, markdown: boolean): string {
  if (typeof e2e === 'string') return `End to end: not measured: ${e2e}`;
  const body = endToEndRows(e2e.runs);
  const table = markdown
    ? markdownTable(body, E2E_HEADER, E2E_RIGHT)
    : textTable(body, E2E_HEADER, E2E_RIGHT);
  const lines = markdown
    ? e2e.targets.map(({ status, target, measured }) => `- **${status}** ${target}: ${measured}`)
    : targetLines(e2e.targets);
  const load = describeMachine([]).loadAverage;
  return [
    `End to end (bench/e2e.ts), ${new Date().toISOString().slice(0, 10)}: ${settings.rounds} interleaved ` +
      `round(s) of ${e2e.count.toLocaleString('en-US')} notifications, ${e2e.concurrency} in flight, timed ` +
      'from the first request to the last ledger row; each ledger checked for one row per payment once its ' +
      'server had stopped. "µs/n": CPU per request sent. Load average (1, 5, 15 min) ' +
      `${load.start} at the start of the run, ${load.end} at the end.`,
    table,
    lines.join('\n'),
  ].join('\n\n');
}

async function main(): Promise<number> {
  const settings = readSettings(process.argv.slice(2), process.env);
  if (settings === 'help') {
    console.log(USAGE);
    return 0;
  }
  let interrupted = false;
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      console.error(`bench: ${signal}: stopping and cleaning up`);
      interrupted = true;
      // The children die now, so the measurement under way ends at once; main() then cleans up and returns.
      killAll();
      // In case it is stuck anyway (a service that does not answer).
      setTimeout(() => void cleanup().finally(() => process.exit(130)), 15_000).unref();
    });
  }
  const runs: VariantRun[] = (settings.e2eOnly ? [] : settings.variants).map((variant) => ({
    variant,
    label: VARIANT_INFO[variant].label,
    rounds: [],
  }));
  const busy = LOAD_AT_START;
  const e2e =
    settings.e2e === 0 ? 'no end-to-end comparison' : `end to end ${settings.e2e} notifications a variant`;
  console.log(
    settings.e2eOnly
      ? `bench: ${settings.rounds} rounds, only ${e2e}, ${settings.e2eConcurrency} in flight; load average ${busy.toFixed(2)}`
      : `bench: ${settings.rounds} rounds × ${settings.variants.length} variants, ${settings.duration} s each ` +
          `after ${settings.warmup} s of warm-up, ${settings.connections} connections; ${e2e}; ` +
          `load average ${busy.toFixed(2)}`,
  );
  if (busy > 0.5) console.warn('bench: the machine is busy with other work: expect noisy figures');
  try {
    built = await buildLib(RUN_TAG);
    await openServices(runs);
    const active = runs.filter((run) => run.skipped === undefined);
    for (let round = 1; round <= settings.rounds; round += 1) {
      for (const run of active) {
        const measurement = await measure(settings, run.variant, round);
        if (interrupted) return 130;
        run.rounds.push(measurement);
        console.log(progress(run.variant, round, settings, measurement));
      }
    }
    const e2e = await measureEndToEnd(settings, () => interrupted);
    if (interrupted) return 130;
    if (settings.e2eOnly) return await endToEndOnly(settings, e2e);
    const memory = await measureMemory(settings.memoryKeys);
    if (interrupted) return 130;
    const stages = await measureStagesApart(settings.rounds === 1);
    if (interrupted) return 130;
    const about = describeMachine([...new Set([...services.values()].map((service) => service.version))]);

    const aggregates = new Map<VariantRun, Aggregate | undefined>(
      runs.map((run) => [run, aggregate(run, runs)]),
    );
    const checks = checkTargets(runs, memory);
    const body = rows(runs, aggregates);
    console.log(
      `\n${textTable(body)}\n\n${memoryLines(memory).join('\n')}\n\n${targetLines(checks).join('\n')}`,
    );
    console.log(`\n${endToEndSection(e2e, settings, false)}`);
    console.log(
      typeof stages === 'string'
        ? `\nstages: not measured: ${stages}`
        : `\nPer-stage budget (bench/stages.ts, in one process, CPU per call against the hand-written node:http server's):\n\n${stagesTable(stages.results)}\n\n${stageVerdict(stages.results)}`,
    );

    if (settings.write) {
      const { write, cpuProf, ...recorded } = settings;
      await writeJson(join(__dirname, 'results.json'), {
        machine: about,
        settings: {
          ...recorded,
          bodyBytes: runs.flatMap((run) => run.rounds).find((m) => m.result)?.result?.bodyBytes,
        },
        variants: runs.map((run) => ({ ...run, aggregate: aggregates.get(run) ?? null })),
        memory,
        targets: checks,
        stages,
        e2e,
      });
      const section = readmeSection(settings, about, markdownTable(body), memoryLines(memory), checks);
      await rewriteSection(join(__dirname, 'README.md'), section);
      await rewriteSection(join(__dirname, 'README.md'), endToEndSection(e2e, settings, true), 'e2e-results');
      console.log('\nbench: wrote bench/results.json and the results sections of bench/README.md');
    }
    // A measurement that failed (a crashed server, a wrong ledger) makes the run a failure; a missed target does not.
    const failed = runs.some((run) => run.rounds.some((measurement) => measurement.error !== undefined));
    return failed || endToEndFailed(e2e) ? 1 : 0;
  } finally {
    await cleanup();
  }
}

/** Whether a measurement of the comparison failed: a server that crashed, a ledger that never filled or is wrong. */
function endToEndFailed(e2e: EndToEndResult | string): boolean {
  return typeof e2e !== 'string' && e2e.runs.some((run) => run.rounds.some((m) => m.error !== undefined));
}

/**
 * `--e2e-only`: prints the comparison and, when writing, replaces only its part of bench/results.json
 * (`e2e`) and its section of bench/README.md, leaving the per-request results of the last full run.
 */
async function endToEndOnly(settings: Settings, e2e: EndToEndResult | string): Promise<number> {
  console.log(`\n${endToEndSection(e2e, settings, false)}`);
  if (typeof e2e === 'string') return 1;
  if (settings.write) {
    const path = join(__dirname, 'results.json');
    const previous = JSON.parse(await readFile(path, 'utf8').catch(() => '{}')) as Record<string, unknown>;
    const about = describeMachine([...new Set([...services.values()].map((service) => service.version))]);
    await writeJson(path, { ...previous, e2e: { machine: about, rounds: settings.rounds, ...e2e } });
    await rewriteSection(join(__dirname, 'README.md'), endToEndSection(e2e, settings, true), 'e2e-results');
    console.log('\nbench: wrote the e2e part of bench/results.json and its section of bench/README.md');
  }
  return endToEndFailed(e2e) ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  async (error: unknown) => {
    // A TypeError is a bad flag or variable, whose message says which: the stack would only hide it.
    const text =
      error instanceof TypeError ? error.message : error instanceof Error ? error.stack : undefined;
    console.error(`bench: ${text ?? String(error)}`);
    await cleanup();
    process.exit(1);
  },
);

/** A latency to two places, or '-' for a round that got no answer (its latencies are NaN, or null once read back). */
function fixed(ms: number | null): string {
  return typeof ms === 'number' && Number.isFinite(ms) ? ms.toFixed(2) : '-';
}
