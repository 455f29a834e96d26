import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';

const root = join(__dirname, '../..');
const EXAMPLE = join(root, 'examples/nextjs');
/** Next's command line, run with this Node. */
export const NEXT_BIN = join(root, 'node_modules/next/dist/bin/next');
const BUILD_ENV = { PAYMENT_STATUS_URL: 'http://127.0.0.1:9/unused-at-build', PAYMENT_API_KEY: 'build-time' };

/** Every file under `dir`, sorted, for the cache key. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath, entry.name))
    .sort();
}

/**
 * Where the example app is built: a folder in the OS temp dir named after a hash of this checkout's path,
 * its sources, the library's sources and the installed Next.js, so a second run with nothing changed reuses
 * the build. The path is in the hash because the build's node_modules are links into this checkout's: a
 * build made by another clone (CI's fresh one, since deleted) would load its packages from there, or from
 * nowhere, and answer 500 to every request.
 */
export function nextAppDir(): string {
  const hash = createHash('sha256');
  hash.update(root);
  for (const file of [...filesUnder(EXAMPLE), ...filesUnder(join(root, 'lib')), __filename]) {
    hash.update(relative(root, file)).update(readFileSync(file));
  }
  hash.update(readFileSync(join(root, 'node_modules/next/package.json')));
  return join(tmpdir(), `ipn-kit-next-${hash.digest('hex').slice(0, 16)}`);
}

/** Whether `dir` holds a finished production build whose package links still lead to this checkout's. */
export function isBuilt(dir: string): boolean {
  return (
    existsSync(join(dir, '.next/BUILD_ID')) &&
    existsSync(join(dir, 'node_modules/next/package.json')) &&
    realpathSync(join(dir, 'node_modules/next')) === realpathSync(join(root, 'node_modules/next'))
  );
}

/**
 * Lays the app out in `dir` as a partner's project: the example's files, ipn-kit compiled from lib/ and
 * installed under node_modules/ipn-kit (CommonJS, with its declarations), and every other package linked
 * from ours. Then `next build`. Throws with Next's output when the build fails.
 */
export function buildNextApp(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(join(dir, 'node_modules'), { recursive: true });
  cpSync(EXAMPLE, dir, { recursive: true });
  for (const name of readdirSync(join(root, 'node_modules'))) {
    if (name.startsWith('.')) continue;
    symlinkSync(join(root, 'node_modules', name), join(dir, 'node_modules', name), 'dir');
  }
  const kit = join(dir, 'node_modules/ipn-kit');
  execFileSync(
    join(root, 'node_modules/.bin/tsc'),
    ['-p', 'lib', '--outDir', join(kit, 'dist'), '--module', 'commonjs', '--moduleResolution', 'node10'],
    { cwd: root, stdio: 'pipe' },
  );
  const entry = (name: string) => ({ types: `./dist/${name}.d.ts`, default: `./dist/${name}.js` });
  writeFileSync(
    join(kit, 'package.json'),
    JSON.stringify({
      name: 'ipn-kit',
      main: './dist/index.js',
      types: './dist/index.d.ts',
      exports: {
        '.': entry('index'),
        './testing': entry('testing'),
        './postgres': entry('postgres'),
        './orm': entry('orm'),
      },
    }),
  );
  writeFileSync(
    join(dir, 'package.json'),
    JSON.stringify({ name: 'next-ipn-example', private: true, type: 'commonjs' }),
  );
  writeFileSync(
    join(dir, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'ES2022',
        lib: ['dom', 'dom.iterable', 'ES2022'],
        strict: true,
        noEmit: true,
        module: 'esnext',
        moduleResolution: 'bundler',
        esModuleInterop: true,
        skipLibCheck: true,
        isolatedModules: true,
        jsx: 'react-jsx',
        incremental: false,
        plugins: [{ name: 'next' }],
      },
      include: ['next-env.d.ts', '**/*.ts', '**/*.tsx'],
      exclude: ['node_modules'],
    }),
  );
  try {
    // webpack, not Turbopack: Turbopack compiles nothing outside the project, and node_modules is linked.
    execFileSync(process.execPath, [NEXT_BIN, 'build', '--webpack'], {
      cwd: dir,
      stdio: 'pipe',
      // The route's module is loaded at build to read its config: the app's settings must be there.
      env: { ...process.env, ...BUILD_ENV, NEXT_TELEMETRY_DISABLED: '1', NODE_ENV: 'production' },
      encoding: 'utf8',
    });
  } catch (error) {
    const { stdout = '', stderr = '' } = error as { stdout?: string; stderr?: string };
    throw new Error(`next build failed in ${dir}:\n${stdout}\n${stderr}`);
  }
}
