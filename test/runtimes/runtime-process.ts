import { execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from './packed.js';

/**
 * A runtime's binary (from our devDependencies: bun, deno, wrangler) and a server process run by it.
 *
 * Whether the runtime runs is found out at load time (jest declares suites synchronously), like the
 * services of test/helpers/services.ts: a runtime that does not run skips its suite with a printed reason,
 * except under `CI=true`, where the file fails: CI must not go green by skipping the runtimes.
 */

/** The runtime's executable, as `npm ci` installs it. */
export function binary(name: 'bun' | 'deno' | 'wrangler'): string {
  return join(ROOT, 'node_modules/.bin', name);
}

/** Why `name` cannot run here (`null` when `<name> --version` answers). */
function cannotRun(name: 'bun' | 'deno' | 'wrangler'): string | null {
  const path = binary(name);
  if (!existsSync(path)) return `${path} is missing (npm ci installs it)`;
  try {
    execFileSync(path, ['--version'], { stdio: ['ignore', 'ignore', 'pipe'], timeout: 30_000 });
    return null;
  } catch (error) {
    const { stderr, message } = error as { stderr?: Buffer; message: string };
    return stderr?.toString().trim() || message;
  }
}

/** `describe(title, fn)` when the runtime runs; else fails under `CI=true`, or warns and skips. */
export function describeWithRuntime(name: 'bun' | 'deno' | 'wrangler', title: string, fn: () => void): void {
  const reason = cannotRun(name);
  if (reason === null) {
    describe(title, fn);
    return;
  }
  if (process.env.CI === 'true') {
    throw new Error(`${name} cannot run (${reason}): CI=true, so "${title}" fails instead of being skipped`);
  }
  console.warn(`${name} cannot run (${reason}): skipping "${title}". Run npm ci.`);
  describe.skip(title, fn);
}

/** A server process, its base URL on 127.0.0.1, everything it printed, and how to end it. */
export interface RuntimeServer {
  url: string;
  output: () => string;
  stop: () => Promise<void>;
}

/**
 * Spawns `command` and resolves once a line of its output matches `ready` (whose first group is the port):
 * no fixed sleep. Rejects, with the output, if it exits first or is not ready within `timeoutMs`. It runs in
 * a process group of its own, so that `stop()` also ends what it spawned (wrangler's workerd).
 */
export function startServer(
  command: string,
  args: string[],
  options: { cwd: string; env?: Record<string, string>; ready: RegExp; timeoutMs?: number },
): Promise<RuntimeServer> {
  const child = spawn(command, args, {
    cwd: options.cwd,
    env: { ...process.env, NO_COLOR: '1', ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let output = '';
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // Already gone.
      }
      await exited;
    }
  };
  return new Promise<RuntimeServer>((resolve, reject) => {
    const timer = setTimeout(() => {
      void stop();
      reject(new Error(`${command} not ready within ${options.timeoutMs ?? 60_000} ms:\n${output}`));
    }, options.timeoutMs ?? 60_000);
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const port = options.ready.exec(output)?.[1];
      if (port === undefined) return;
      clearTimeout(timer);
      child.stdout.off('data', onData);
      child.stderr.off('data', onData);
      // Keep collecting what it prints, for the failure messages and the Workers log assertions.
      child.stdout.on('data', (more: Buffer) => (output += more.toString()));
      child.stderr.on('data', (more: Buffer) => (output += more.toString()));
      resolve({ url: `http://127.0.0.1:${port}`, output: () => output, stop });
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`${command} exited (${code ?? signal}) before it was ready:\n${output}`));
    });
  });
}

/**
 * `wrangler dev <entry>` run from `examples/runtimes/` inside the packed app `dir` (where wrangler.toml is,
 * and whose node_modules resolve ipn-kit), on a free port of 127.0.0.1.
 */
export function wranglerDev(dir: string, entry: string, ...more: string[]): Promise<RuntimeServer> {
  return startServer(
    binary('wrangler'),
    [
      'dev',
      entry,
      '--config',
      'wrangler.toml',
      '--ip',
      '127.0.0.1',
      '--port',
      '0',
      '--show-interactive-dev-session=false',
      ...more,
    ],
    {
      cwd: join(dir, 'examples/runtimes'),
      env: { WRANGLER_SEND_METRICS: 'false', WRANGLER_LOG_PATH: join(dir, 'logs') },
      ready: /Ready on http:\/\/[^:/]+:(\d+)/,
    },
  );
}
