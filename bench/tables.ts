import type { Machine } from './machine.js';
import type { MemoryResult } from './memory.js';
import type { Settings } from './settings.js';
import type { Aggregate, TargetCheck, VariantRun } from './summary.js';

const HEADER = [
  'variant',
  'req/s',
  'p50 ms',
  'p99 ms',
  'non-2xx',
  'errors',
  'vs baseline',
  'vs reference',
  'CPU µs/req',
  'service µs/req',
  'load µs/req',
  'machine µs/req',
  'req/s per round',
];
const RIGHT = [false, true, true, true, true, true, true, true, true, true, true, true, false];

const integer = (value: number): string => Math.round(value).toLocaleString('en-US');

/** One row per variant: its aggregate, or why it has none. */
export function rows(runs: VariantRun[], aggregates: Map<VariantRun, Aggregate | undefined>): string[][] {
  return runs.map((run) => {
    const found = aggregates.get(run);
    const name = `${run.variant}: ${run.label}`;
    if (!found) {
      const failures = run.rounds.flatMap(({ round, error }) => (error ? [`round ${round}: ${error}`] : []));
      const why = run.skipped ?? (failures.join('; ') || 'no numbers');
      return [name, run.skipped ? 'skipped' : 'failed', '', '', '', '', '', '', '', '', '', '', why];
    }
    const perRound = run.rounds
      .map(({ result, error }) => (result ? integer(result.rps) : error ? 'failed' : '-'))
      .join(' / ');
    return [
      name,
      integer(found.rps),
      Number.isFinite(found.p50) ? found.p50.toFixed(2) : '-',
      Number.isFinite(found.p99) ? found.p99.toFixed(2) : '-',
      String(found.non2xx),
      String(found.errors),
      found.ratio === null ? '-' : `${found.ratio.toFixed(2)}x`,
      found.referenceRatio === null ? '-' : `${found.referenceRatio.toFixed(2)}x ${found.reference}`,
      found.cpuPerRequest === null ? '-' : found.cpuPerRequest.toFixed(0),
      found.serviceCpuPerRequest === null ? '-' : found.serviceCpuPerRequest.toFixed(0),
      Number.isFinite(found.loadCpuPerRequest) ? found.loadCpuPerRequest.toFixed(0) : '-',
      found.machineCpuPerRequest === null ? '-' : found.machineCpuPerRequest.toFixed(0),
      perRound,
    ];
  });
}

/** The table as aligned text, for the terminal; the per-request table's columns unless others are given. */
export function textTable(body: string[][], header = HEADER, right = RIGHT): string {
  const all = [header, ...body];
  const widths = header.map((_, column) => Math.max(...all.map((row) => (row[column] ?? '').length)));
  const line = (row: string[]): string =>
    row
      .map((cell, column) => (right[column] ? cell.padStart(widths[column]!) : cell.padEnd(widths[column]!)))
      .join('  ')
      .trimEnd();
  return [line(header), widths.map((width) => '-'.repeat(width)).join('  '), ...body.map(line)].join('\n');
}

/** The table in Markdown; the per-request table's columns unless others are given. */
export function markdownTable(body: string[][], header = HEADER, right = RIGHT): string {
  const line = (row: string[]): string => `| ${row.map((cell) => cell.replaceAll('|', '\\|')).join(' | ')} |`;
  const rule = `|${right.map((aligned) => (aligned ? ' ---: ' : ' --- ')).join('|')}|`;
  return [line(header), rule, ...body.map(line)].join('\n');
}

/** The MemoryStore figures, one per line. */
export function memoryLines(memory: MemoryResult | string): string[] {
  if (typeof memory === 'string') return [`MemoryStore: not measured: ${memory}`];
  const keys = memory.keys.toLocaleString('en-US');
  return [
    `MemoryStore heap after ${keys} distinct keys: ${memory.heapMB.toFixed(1)} MB ` +
      `(${(memory.heapBytes / 2 ** 20).toFixed(1)} MiB, ${Math.round(memory.bytesPerKey)} bytes per key; ` +
      `${memory.size.toLocaleString('en-US')} held, ${memory.evictions} evicted)`,
    `MemoryStore claim: ${memory.claimMicros.toFixed(3)} µs per new key, ` +
      `${memory.resendMicros.toFixed(3)} µs per resend (means over ${keys} claims)`,
  ];
}

/** `PASS  target: measured`, one per target. */
export function targetLines(checks: TargetCheck[]): string[] {
  return checks.map(({ status, target, measured }) => `${status.padEnd(4)}  ${target}: ${measured}`);
}

/** The results section of bench/README.md: the settings, the table, the memory figures, targets, machine. */
export function readmeSection(
  settings: Settings,
  machine: Machine,
  table: string,
  memory: string[],
  checks: TargetCheck[],
): string {
  const packages = Object.entries(machine.packages).map(([name, version]) => `${name} ${version}`);
  return [
    `Last run ${machine.date.slice(0, 10)}: ${settings.rounds} rounds of ${settings.duration} s per variant ` +
      `(after ${settings.warmup} s of warm-up), ${settings.connections} connections. Means over the rounds; ` +
      '"vs baseline" is the mean of each round\'s ratio to the baseline of the same round; "vs reference" the ' +
      'same to the server a partner would write instead (named after the ratio).',
    table,
    memory.map((line) => `- ${line}`).join('\n'),
    '**Targets** (informational):',
    checks.map(({ status, target, measured }) => `- **${status}** ${target}: ${measured}`).join('\n'),
    '**Machine**:',
    [
      `- ${machine.os}, ${machine.cpuCount} × ${machine.cpuModel}, ${machine.memoryGiB} GiB; load average ` +
        `(1, 5, 15 min) ${machine.loadAverage.start} at the start, ${machine.loadAverage.end} at the end`,
      `- Node.js ${machine.node}; ${[...machine.services, ...packages].join(', ')}`,
    ].join('\n'),
  ].join('\n\n');
}
