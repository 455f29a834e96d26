/**
 * The run's build of lib/, which the bench servers load: JavaScript as `npm run build` makes it (tsc, ES
 * modules), so that a server runs what a partner's does. Loaded as TypeScript through tsx, the router paid
 * for tsx's wrappers around every named closure it makes (`__name`, about 1 µs each, eight per request):
 * a fifth to a quarter of its CPU, which the published package never pays (bench/README.md).
 */
import { execFile } from 'node:child_process';
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';

const ROOT = join(__dirname, '..');

/**
 * Compiles lib/ into a folder of `node_modules/.cache` (inside the project, so that the build's imports of
 * zod and eventemitter3 resolve to the project's), named by `tag`. Resolves the folder and its remover.
 */
export async function buildLib(tag: string): Promise<{ dir: string; remove(): Promise<void> }> {
  const dir = join(ROOT, 'node_modules', '.cache', 'ipn-kit-bench', tag);
  const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
  await promisify(execFile)(process.execPath, [tsc, '-p', 'lib', '--outDir', dir, '--module', 'es2022'], {
    cwd: ROOT,
  });
  await writeFile(join(dir, 'package.json'), '{"type":"module"}\n');
  return { dir, remove: () => rm(dir, { recursive: true, force: true }) };
}
