import { parseArgs } from 'node:util';
import { VARIANTS, type Variant } from './variants.js';

/** How the run measures; flags override the BENCH_* environment variables, which override the defaults. */
export interface Settings {
  /** Rounds; each runs every variant once, in order, so that drift of the machine hits them all alike. */
  rounds: number;
  /** Seconds measured per variant per round. */
  duration: number;
  /** Seconds of unmeasured load before each measurement. */
  warmup: number;
  /** Concurrent connections autocannon keeps open. */
  connections: number;
  variants: Variant[];
  /** Keys for the MemoryStore measurement; 0 skips it. */
  memoryKeys: number;
  /** Where to write a `--cpu-prof` profile of every server process, if anywhere. */
  cpuProf: string | undefined;
  /** Whether to write bench/results.json and the results section of bench/README.md. */
  write: boolean;
  /** Notifications per round of the end-to-end comparison (bench/e2e.ts); 0 skips it. */
  e2e: number;
  /** Requests in flight at once in the end-to-end comparison. */
  e2eConcurrency: number;
  /** Only the end-to-end comparison: no per-request variants, memory or stages. */
  e2eOnly: boolean;
}

export const USAGE = `npm run bench -- [options]

  --rounds N        rounds, each running every variant once (BENCH_ROUNDS, default 3)
  --duration S      seconds measured per variant per round (BENCH_DURATION, default 5)
  --warmup S        unmeasured seconds before each measurement (BENCH_WARMUP, default 1)
  --connections N   concurrent connections (BENCH_CONNECTIONS, default 50)
  --variants LIST   comma-separated subset of ${VARIANTS.join(',')} (BENCH_VARIANTS)
  --memory-keys N   keys for the MemoryStore measurement, 0 to skip (BENCH_MEMORY_KEYS, default 1000000)
  --e2e N           notifications per round of the end-to-end comparison, 0 to skip (BENCH_E2E, default 6000)
  --e2e-concurrency N  requests in flight in it (BENCH_E2E_CONCURRENCY, default 10)
  --e2e-only        only the end-to-end comparison (no per-request variants, memory or stages)
  --quick           1 round of 2 s, 0.5 s warm-up, 100,000 keys, 500 notifications end to end; writes
                    nothing unless --write
  --cpu-prof DIR    profile each server process (node --cpu-prof) into DIR/<variant>-round<N>/
                    (DIR/e2e-<variant>-round<N>/ for the end-to-end comparison)
  --no-write        do not write bench/results.json and bench/README.md
  --write           write them even with --quick
  --help`;

function number(name: string, given: string | undefined, fallback: number, minimum: number): number {
  if (given === undefined || given === '') return fallback;
  const value = Number(given);
  if (!Number.isFinite(value) || value < minimum) {
    throw new TypeError(`${name} must be a number of at least ${minimum}, got ${given}`);
  }
  return value;
}

/** Reads the flags in `argv` and the BENCH_* variables. @throws TypeError for a bad value. */
export function readSettings(argv: string[], env: NodeJS.ProcessEnv): Settings | 'help' {
  const { values } = parseArgs({
    args: argv,
    options: {
      rounds: { type: 'string' },
      duration: { type: 'string' },
      warmup: { type: 'string' },
      connections: { type: 'string' },
      variants: { type: 'string' },
      'memory-keys': { type: 'string' },
      quick: { type: 'boolean', default: false },
      'cpu-prof': { type: 'string' },
      'no-write': { type: 'boolean', default: false },
      write: { type: 'boolean', default: false },
      e2e: { type: 'string' },
      'e2e-concurrency': { type: 'string' },
      'e2e-only': { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) return 'help';
  const quick = values.quick;
  const list = (values.variants ?? env.BENCH_VARIANTS ?? '').trim();
  const variants = list === '' ? [...VARIANTS] : list.split(',').map((name) => name.trim());
  const unknown = variants.filter((name) => !(VARIANTS as readonly string[]).includes(name));
  if (unknown.length > 0) {
    throw new TypeError(`unknown variant ${unknown.join(', ')} (known: ${VARIANTS.join(', ')})`);
  }
  return {
    rounds: Math.floor(number('rounds', values.rounds ?? env.BENCH_ROUNDS, quick ? 1 : 3, 1)),
    duration: number('duration', values.duration ?? env.BENCH_DURATION, quick ? 2 : 5, 1),
    warmup: number('warmup', values.warmup ?? env.BENCH_WARMUP, quick ? 0.5 : 1, 0),
    connections: Math.floor(number('connections', values.connections ?? env.BENCH_CONNECTIONS, 50, 1)),
    // In the order of VARIANTS, whatever the order given.
    variants: VARIANTS.filter((variant) => variants.includes(variant)),
    memoryKeys: Math.floor(
      number('memory-keys', values['memory-keys'] ?? env.BENCH_MEMORY_KEYS, quick ? 100_000 : 1_000_000, 0),
    ),
    cpuProf: values['cpu-prof'],
    write: !values['no-write'] && (!quick || values.write),
    e2e: Math.floor(number('e2e', values.e2e ?? env.BENCH_E2E, quick ? 500 : 6000, 0)),
    e2eConcurrency: Math.floor(
      number('e2e-concurrency', values['e2e-concurrency'] ?? env.BENCH_E2E_CONCURRENCY, 10, 1),
    ),
    e2eOnly: values['e2e-only'],
  };
}
