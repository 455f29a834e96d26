/**
 * Summarises a `.cpuprofile` (from `npm run bench -- --cpu-prof DIR`): where the time goes, by package and by
 * function, self and inclusive. `npx tsx bench/profile.ts DIR/memory-round1.cpuprofile [top]`.
 */
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const ROOT = relative('/', `${__dirname}/..`);

/** Where a frame's code lives: ipn-kit's lib, a package, Node itself, or V8's pseudo-frames. */
function placeOf(url: string, name: string): string {
  if (url === '') return name.startsWith('(') ? name : '(native)';
  if (url.startsWith('node:')) return 'node (core)';
  const path = url.replace(/^file:\/\//, '');
  const packages = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(path);
  if (packages) return packages[1]!;
  if (path.includes(`${ROOT}/lib/`)) return 'ipn-kit lib';
  if (path.includes(`${ROOT}/bench/`)) return 'bench';
  return path;
}

function labelOf({ callFrame: { functionName, url, lineNumber } }: ProfileNode): string {
  const file = url
    .replace(/^file:\/\//, '')
    .replace(/^.*node_modules\//, '')
    .replace(/^.*\/work\/main\//, '');
  return `${functionName || '(anonymous)'} ${file ? `${file}:${lineNumber + 1}` : ''}`.trim();
}

function summarise(profile: Profile, top: number): string {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const self = new Map<number, number>();
  profile.samples.forEach((id, index) =>
    self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[index] ?? 0)),
  );
  const total = [...self.values()].reduce((sum, value) => sum + value, 0);
  const idle = [...self].filter(([id]) => byId.get(id)?.callFrame.functionName === '(idle)');
  const busy = total - idle.reduce((sum, [, value]) => sum + value, 0);

  const selfByFunction = new Map<string, number>();
  const selfByPlace = new Map<string, number>();
  const inclusive = new Map<string, number>();
  // Inclusive time counts each function once per stack, however deep its recursion.
  const walk = (node: ProfileNode, onStack: Set<string>): number => {
    const label = labelOf(node);
    const own = self.get(node.id) ?? 0;
    selfByFunction.set(label, (selfByFunction.get(label) ?? 0) + own);
    const place = placeOf(node.callFrame.url, node.callFrame.functionName);
    selfByPlace.set(place, (selfByPlace.get(place) ?? 0) + own);
    const fresh = !onStack.has(label);
    if (fresh) onStack.add(label);
    let sum = own;
    for (const child of node.children ?? []) sum += walk(byId.get(child)!, onStack);
    if (fresh) {
      onStack.delete(label);
      inclusive.set(label, (inclusive.get(label) ?? 0) + sum);
    }
    return sum;
  };
  walk(profile.nodes[0]!, new Set());

  const percent = (value: number): string => `${((value / busy) * 100).toFixed(1).padStart(5)}%`;
  const list = (map: Map<string, number>, count: number): string[] =>
    [...map]
      .filter(([label]) => !label.startsWith('(idle)') && !label.startsWith('(root)'))
      .sort((a, b) => b[1] - a[1])
      .slice(0, count)
      .map(([label, value]) => `  ${percent(value)}  ${label}`);
  return [
    `busy ${(busy / 1e6).toFixed(2)} s of ${(total / 1e6).toFixed(2)} s sampled; shares of the busy time`,
    'self time by place:',
    ...list(selfByPlace, 12),
    `self time, top ${top} functions:`,
    ...list(selfByFunction, top),
    `inclusive time, top ${top} functions:`,
    ...list(inclusive, top),
  ].join('\n');
}

const [file, count] = process.argv.slice(2);
if (!file) {
  console.error('usage: npx tsx bench/profile.ts FILE.cpuprofile [top]');
  process.exit(2);
}
console.log(summarise(JSON.parse(readFileSync(file, 'utf8')) as Profile, Number(count ?? 25)));
