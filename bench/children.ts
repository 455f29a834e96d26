import { fork, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';

/** Every child still running, so that any exit of the orchestrator can end them. */
const live = new Set<ChildProcess>();
/** Set by {@link killAll}: the run is ending, and no child may start any more. */
let closed = false;

/**
 * Starts `bench/<script>` with tsx in a process of its own, `env` added to the environment.
 * @throws Error once {@link killAll} was called.
 */
export function start(script: string, env: Record<string, string>, nodeOptions: string[] = []): ChildProcess {
  if (closed) throw new Error('the run is stopping');
  const child = fork(join(__dirname, script), [], {
    execArgv: [...nodeOptions, '--import', 'tsx'],
    env: { ...process.env, ...env },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  live.add(child);
  child.once('exit', () => live.delete(child));
  // A failed send or kill of a child that died: what matters is reported by `receive`, which sees the exit.
  child.on('error', () => {});
  return child;
}

/** Sends `message` to `child` if it is still there; a child that is gone makes `receive` reject instead. */
export function tell(child: ChildProcess, message: string): void {
  if (child.connected) child.send(message, () => {});
}

const exited = (child: ChildProcess): boolean => child.exitCode !== null || child.signalCode !== null;

/**
 * The first message `{ type, ...rest }` of `type` from `child`. Rejects when the child exits first, or after
 * `timeoutMs`.
 */
export function receive<T>(child: ChildProcess, type: string, timeoutMs: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const done = (): void => {
      clearTimeout(timer);
      child.off('message', onMessage);
      child.off('exit', onExit);
    };
    const onMessage = (message: unknown): void => {
      if (typeof message !== 'object' || message === null || Reflect.get(message, 'type') !== type) return;
      done();
      resolve(message as T);
    };
    const onExit = (code: number | null, signal: NodeJS.Signals | null): void => {
      done();
      reject(new Error(`the process exited (${signal ?? `code ${code}`}) before it sent '${type}'`));
    };
    const timer = setTimeout(() => {
      done();
      reject(new Error(`no '${type}' within ${timeoutMs / 1000} s`));
    }, timeoutMs);
    if (exited(child)) return onExit(child.exitCode, child.signalCode);
    child.on('message', onMessage);
    child.once('exit', onExit);
  });
}

/** Resolves once `child` has exited; kills it (SIGKILL) if it has not within `timeoutMs`. */
export function ended(child: ChildProcess, timeoutMs: number): Promise<void> {
  if (exited(child)) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

/** Kills every child still running, each by its own handle, and refuses to start any more. */
export function killAll(): void {
  closed = true;
  for (const child of live) child.kill('SIGKILL');
}
