import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

/**
 * ipn-kit as a user gets it: the packed tarball installed into a scratch project in the OS temp dir.
 *
 * Packing builds the library (`prepack`), which takes tens of seconds: so it is done once for what the
 * tarball is made of (lib/, package.json, the README and docs it ships), and the install is kept in a
 * folder named by a hash of those files. The runtime suites run in parallel jest workers: the first takes
 * a lock (an atomic `mkdir`) and builds, the others wait for its `ready` marker. A later run with the same
 * sources finds the folder ready and costs nothing.
 */

export const ROOT = resolve(__dirname, '../..');

/** How long a lock is believed held: longer than any build, so an abandoned one (a killed run) is taken over. */
const STALE_LOCK_MS = 5 * 60_000;

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true })
    .flatMap((entry) => (entry.isDirectory() ? filesUnder(join(dir, entry.name)) : [join(dir, entry.name)]))
    .sort();
}

/** A hash of everything the tarball is built from. */
function sourceHash(): string {
  const hash = createHash('sha256');
  const files = [
    ...filesUnder(join(ROOT, 'lib')),
    ...filesUnder(join(ROOT, 'docs')).filter((file) => file.endsWith('.md')),
    join(ROOT, 'package.json'),
    join(ROOT, 'README.md'),
    join(ROOT, 'CHANGELOG.md'),
  ];
  for (const file of files) hash.update(file.slice(ROOT.length)).update('\0').update(readFileSync(file));
  return hash.digest('hex').slice(0, 16);
}

/** Blocks the thread for `ms` (a worker waiting for another's build; jest's own timers are not involved). */
function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** Installs of other sources (earlier versions of lib/) older than a day: no run of today uses them. */
function removeOldInstalls(): void {
  for (const name of readdirSync(tmpdir())) {
    if (!name.startsWith('ipn-kit-runtimes-')) continue;
    const path = join(tmpdir(), name);
    const since = statSync(path, { throwIfNoEntry: false })?.mtimeMs ?? Date.now();
    if (Date.now() - since > 24 * 60 * 60_000) rmSync(path, { recursive: true, force: true });
  }
}

function build(app: string): void {
  removeOldInstalls();
  rmSync(app, { recursive: true, force: true });
  mkdirSync(app, { recursive: true });
  const run = (command: string, args: string[], cwd: string) =>
    execFileSync(command, args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  const [{ filename }] = JSON.parse(run('npm', ['pack', '--json', '--pack-destination', app], ROOT)) as [
    { filename: string },
  ];
  // "type": "module": the server files are ESM, as Bun, Deno and Workers projects are.
  writeFileSync(
    join(app, 'package.json'),
    JSON.stringify({ name: 'runtime-app', private: true, type: 'module' }),
  );
  run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', `./${filename}`], app);
  writeFileSync(join(app, 'ready'), filename);
}

let cached: string | undefined;

/** The scratch project with ipn-kit installed from the tarball; built on first call, shared after. */
export function packedApp(): string {
  if (cached !== undefined) return cached;
  const app = join(tmpdir(), `ipn-kit-runtimes-${sourceHash()}`);
  const lock = `${app}.lock`;
  for (;;) {
    if (existsSync(join(app, 'ready'))) return (cached = app);
    try {
      mkdirSync(lock);
    } catch {
      const since = statSync(lock, { throwIfNoEntry: false })?.mtimeMs ?? Date.now();
      if (Date.now() - since > STALE_LOCK_MS) {
        rmSync(lock, { recursive: true, force: true });
      } else {
        sleepSync(200);
      }
      continue;
    }
    try {
      if (!existsSync(join(app, 'ready'))) build(app);
    } finally {
      rmSync(lock, { recursive: true, force: true });
    }
  }
}
