import { fork, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { databaseUrl, mysqlUrl, redisUrl } from './services.js';

const SCRIPT = join(__dirname, '..', 'processes', 'app-instance.ts');

/** A partner app instance running in a child process (see test/processes/app-instance.ts). */
export interface Instance {
  url: string;
  child: ChildProcess;
  /** How many `successful` events this instance emitted. */
  successful(): Promise<number>;
  /** Resolves when a listener of this instance has started for `id`. */
  started(id: string): Promise<void>;
  kill(signal?: NodeJS.Signals): Promise<void>;
}

/** Starts an instance with `config` (the INSTANCE JSON) and resolves once it listens. */
export function startInstance(config: Record<string, unknown>): Promise<Instance> {
  const child = fork(SCRIPT, [], {
    execArgv: ['--import', 'tsx'],
    env: {
      ...process.env,
      INSTANCE: JSON.stringify(config),
      REDIS_URL: redisUrl(),
      DATABASE_URL: databaseUrl(),
      MYSQL_URL: mysqlUrl(),
    },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const started = new Set<string>();
  const waiting = new Map<string, () => void>();
  child.on('message', (message: { type: string; id?: string }) => {
    if (message.type !== 'started' || message.id === undefined) return;
    started.add(message.id);
    waiting.get(message.id)?.();
  });
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`the instance exited (${code}) before it listened`)));
    child.on('message', (message: { type: string; url?: string }) => {
      if (message.type !== 'ready' || message.url === undefined) return;
      resolve({
        url: message.url,
        child,
        successful: () =>
          new Promise((answer) => {
            const listener = (reply: { type: string; successful?: number }) => {
              if (reply.type !== 'count') return;
              child.off('message', listener);
              answer(reply.successful ?? 0);
            };
            child.on('message', listener);
            child.send('count');
          }),
        started: (id) =>
          started.has(id) ? Promise.resolve() : new Promise<void>((done) => waiting.set(id, done)),
        kill: (signal = 'SIGTERM') =>
          new Promise<void>((done) => {
            if (child.exitCode !== null || child.signalCode !== null) return done();
            child.once('exit', () => done());
            child.kill(signal);
          }),
      });
    });
  });
}
