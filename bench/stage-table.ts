/** The per-stage table (bench/stages.ts measures it; bench/run.ts prints it too, without loading the router). */

/** One row's figures over the run. */
export interface StageResult {
  group: 'stage' | 'adapter';
  name: string;
  reference: string | null;
  /** Median over the rounds of the row's CPU µs per call. */
  micros: number;
  /** Median over the rounds of its ratio to the hand-written node:http server's of the same round. */
  ratio: number;
  /** The lower and upper quartiles of those ratios: how much the machine moved them. */
  spread: [number, number];
  /** Median over the rounds of its ratio to its own reference row's, when it has one. */
  referenceRatio: number | null;
  budget: number | null;
  /** What the budget is a multiple of: the raw server's CPU, or the row's reference's. */
  budgetAgainst: 'raw' | 'reference';
  status: 'PASS' | 'OVER' | null;
}

/** The settings of a run: rounds counted, and the CPU time each row aims at per round. */
export interface StageSettings {
  rounds: number;
  millisPerRow: number;
  /** Only the rows whose name contains this (and the raw server's), e.g. to profile one. */
  only?: string | undefined;
}

/**
 * A full garbage collection, so that the garbage one row left is not collected on the next row's time
 * (`--expose-gc` is switched on from here when the process was started without it).
 */
/** The table, in text (`markdown` false) or Markdown. */
export function stagesTable(results: StageResult[], markdown = false): string {
  const header = ['row', 'CPU µs/req', '× raw', 'quartiles', 'budget', '', 'vs its reference'];
  const body = results.map((result) => [
    `${result.group}: ${result.name}`,
    result.micros.toFixed(2),
    result.ratio.toFixed(3),
    `${result.spread[0].toFixed(2)}-${result.spread[1].toFixed(2)}`,
    result.budget === null ? '' : `≤ ${result.budget.toFixed(2)}${unit(result)}`,
    result.status ?? '',
    result.referenceRatio === null ? '' : `${result.referenceRatio.toFixed(2)}x ${result.reference}`,
  ]);
  const right = [false, true, true, true, true, false, false];
  if (markdown) {
    const line = (row: string[]): string => `| ${row.join(' | ')} |`;
    const rule = `|${right.map((r) => (r ? ' ---: ' : ' --- ')).join('|')}|`;
    return [line(header), rule, ...body.map(line)].join('\n');
  }
  const widths = header.map((_, column) => Math.max(...[header, ...body].map((row) => row[column]!.length)));
  const line = (row: string[]): string =>
    row
      .map((cell, column) => (right[column] ? cell.padStart(widths[column]!) : cell.padEnd(widths[column]!)))
      .join('  ')
      .trimEnd();
  return [line(header), widths.map((width) => '-'.repeat(width)).join('  '), ...body.map(line)].join('\n');
}

/** `OVER  row: figure` for each row over its budget, or one line saying all are within. */
export function stageVerdict(results: StageResult[]): string {
  const over = results.filter((result) => result.status === 'OVER');
  if (over.length === 0)
    return `stages: every row within its budget (${results.filter((r) => r.status).length} rows)`;
  return over
    .map((result) =>
      result.budgetAgainst === 'reference'
        ? `OVER  ${result.name}: ${result.referenceRatio?.toFixed(3)}x ${result.reference}, budget ${result.budget}x`
        : `OVER  ${result.name}: ${result.ratio.toFixed(3)}× raw, budget ${result.budget}× raw`,
    )
    .join('\n');
}

function unit(result: StageResult): string {
  return result.budgetAgainst === 'reference' ? 'x ref' : '× raw';
}
