import type { LoadResult } from './load.js';
import type { MemoryResult } from './memory.js';
import { VARIANT_INFO, type ServerStats, type Variant } from './variants.js';

/** One variant's measurement in one round: its numbers, or why there are none. */
export interface Measurement {
  round: number;
  result?: LoadResult;
  /** Events the server's router emitted, warm-up included (all 0 for the baseline), and its CPU time. */
  stats?: ServerStats;
  /** CPU time the variant's Redis, PostgreSQL or MariaDB spent over the measurement, when it can be read. */
  serviceCpuMicros?: number;
  error?: string;
}

/** A variant over the whole run. */
export interface VariantRun {
  variant: Variant;
  label: string;
  /** Why it did not run at all (its service is unreachable, or it was not selected). */
  skipped?: string;
  rounds: Measurement[];
}

/** A variant's numbers over its rounds. */
export interface Aggregate {
  /** Rounds that produced numbers. */
  rounds: number;
  /** Means over those rounds. */
  rps: number;
  p50: number;
  p99: number;
  /** Sums over those rounds. */
  non2xx: number;
  errors: number;
  /**
   * The server's CPU time per response, in microseconds (warm-up included), mean over the rounds: less
   * sensitive than req/s to other processes taking the CPU. Null without the server's figures.
   */
  cpuPerRequest: number | null;
  /**
   * The same for the variant's Redis, PostgreSQL or MariaDB server (SQLite runs in the server process: its
   * CPU is in `cpuPerRequest`); null without one, or when it cannot be read.
   */
  serviceCpuPerRequest: number | null;
  /** The same for the load generator (autocannon, in its own process on the same machine). */
  loadCpuPerRequest: number;
  /**
   * Server, service and load generator together: the machine's CPU per request. On a machine whose cores
   * they all share, req/s is about (cores × 1 s) / this, so the ratio of two variants is about the inverse
   * ratio of this figure: it says where a variant's req/s went.
   */
  machineCpuPerRequest: number | null;
  /** Mean over rounds of this variant's req/s divided by the baseline's of the same round; null without any. */
  ratio: number | null;
  /** The server a partner would write instead (issue 27), when the variant has one in `VARIANT_INFO`. */
  reference: Variant | null;
  /** The same mean ratio as `ratio`, to the reference's req/s; null without a reference or its numbers. */
  referenceRatio: number | null;
}

/** A target from the issue: informational, it never fails the run. */
export interface TargetCheck {
  target: string;
  status: 'PASS' | 'MISS' | 'SKIP';
  /** The measured figure, or why there is none. */
  measured: string;
}

const mean = (values: number[]): number => values.reduce((sum, value) => sum + value, 0) / values.length;

/**
 * The mean over rounds of `run`'s req/s divided by `reference`'s of the same round (the two ran minutes
 * apart at most, so drift of the machine hits them alike), or null when no round has both.
 */
export function meanRatio(run: VariantRun | undefined, reference: VariantRun | undefined): number | null {
  const ratios = (run?.rounds ?? []).flatMap(({ round, result }) => {
    const base = reference?.rounds.find((measurement) => measurement.round === round)?.result;
    return result && base && base.rps > 0 ? [result.rps / base.rps] : [];
  });
  return ratios.length > 0 ? mean(ratios) : null;
}

/** The aggregate of `run` among `runs` (its baseline and reference), or undefined when no round produced numbers. */
export function aggregate(run: VariantRun, runs: VariantRun[]): Aggregate | undefined {
  const results = run.rounds.flatMap(({ result }) => (result ? [result] : []));
  if (results.length === 0) return undefined;
  const find = (variant: Variant | undefined) => runs.find((other) => other.variant === variant);
  const reference = VARIANT_INFO[run.variant].reference ?? null;
  const cpu = run.rounds.flatMap(({ result, stats }) =>
    result && stats ? [stats.cpuMicros / (result.responses + result.warmupResponses)] : [],
  );
  const perRequest = (pick: (measurement: Measurement, served: number) => number | undefined): number[] =>
    run.rounds.flatMap((measurement) => {
      const { result } = measurement;
      const value = result && pick(measurement, result.responses + result.warmupResponses);
      return value === undefined || !Number.isFinite(value) ? [] : [value];
    });
  const service = perRequest(({ serviceCpuMicros }, served) =>
    serviceCpuMicros === undefined ? undefined : serviceCpuMicros / served,
  );
  const load = perRequest(({ result }, served) => result!.cpuMicros / served);
  // SQLite runs inside the server process: its CPU is the server's.
  const needs = VARIANT_INFO[run.variant].needs;
  const external = needs !== undefined && needs !== 'SQLite';
  const machine = perRequest(({ result, stats, serviceCpuMicros }, served) =>
    stats === undefined || (serviceCpuMicros === undefined && external)
      ? undefined
      : (stats.cpuMicros + (serviceCpuMicros ?? 0) + result!.cpuMicros) / served,
  );
  return {
    rounds: results.length,
    rps: mean(results.map((result) => result.rps)),
    p50: mean(results.map((result) => result.p50)),
    p99: mean(results.map((result) => result.p99)),
    non2xx: results.reduce((sum, result) => sum + result.non2xx, 0),
    errors: results.reduce((sum, result) => sum + result.errors + result.timeouts, 0),
    cpuPerRequest: cpu.length > 0 ? mean(cpu) : null,
    serviceCpuPerRequest: service.length > 0 ? mean(service) : null,
    loadCpuPerRequest: mean(load),
    machineCpuPerRequest: machine.length > 0 ? mean(machine) : null,
    ratio: meanRatio(run, find('baseline')),
    reference,
    referenceRatio: reference === null ? null : meanRatio(run, find(reference)),
  };
}

/**
 * The issues' targets, checked against this run: issue 27's, each against the server a partner would write
 * instead, and those of issue 10 that it does not replace.
 */
export function checkTargets(runs: VariantRun[], memory: MemoryResult | string): TargetCheck[] {
  const find = (variant: Variant) => runs.find((run) => run.variant === variant);
  const ratioTarget = (
    variant: Variant,
    reference: Variant,
    target: string,
    minimum: number,
  ): TargetCheck => {
    const ratio = meanRatio(find(variant), find(reference));
    if (ratio === null) {
      const missing = [variant, reference].filter((name) => !find(name)?.rounds.some(({ result }) => result));
      return {
        target,
        status: 'SKIP',
        measured: `not measured (${missing.join(', ') || 'no common round'})`,
      };
    }
    return { target, status: ratio >= minimum ? 'PASS' : 'MISS', measured: `${ratio.toFixed(2)}x` };
  };
  const memoryTarget = 'MemoryStore heap after 1M keys < 150 MB';
  return [
    // Issue 27: against what a partner would write instead of ipn-kit.
    ratioTarget(
      'node-http',
      'node-raw',
      'node-http (router on node:http) >= 0.9x node-raw (node:http + JSON.parse)',
      0.9,
    ),
    ratioTarget('memory', 'baseline', 'Express router (memory) >= 1.3x baseline', 1.3),
    ratioTarget('redis', 'baseline', 'redis >= 1.0x baseline', 1.0),
    // Issue 35: with no tracer provider registered, traces cost nothing ("the same": within the noise).
    ratioTarget(
      'memory-otel-api',
      'memory',
      'memory-otel-api (@opentelemetry/api, no tracer provider) >= 0.95x memory',
      0.95,
    ),
    ratioTarget('postgres', 'baseline', 'postgres (at-least-once) >= 0.9x baseline', 0.9),
    ratioTarget(
      'postgres-ledger',
      'handwritten-ledger',
      'postgres-ledger (exactly once through db) >= 1.0x handwritten-ledger',
      1.0,
    ),
    // Issue 10's that issue 27 does not replace: "well above" read as at least a fifth above.
    ratioTarget('node-http', 'baseline', 'node:http adapter well above baseline (>= 1.2x)', 1.2),
    typeof memory === 'string'
      ? { target: memoryTarget, status: 'SKIP', measured: memory }
      : memory.keys !== 1_000_000
        ? { target: memoryTarget, status: 'SKIP', measured: `measured with ${memory.keys} keys` }
        : {
            target: memoryTarget,
            status: memory.heapMB < 150 ? 'PASS' : 'MISS',
            measured: `${memory.heapMB.toFixed(1)} MB`,
          },
  ];
}
