import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';

/** Whether `redis-server` can be started here (the suites that kill a Redis start their own). */
export function canStartRedis(): boolean {
  return spawnSync('redis-server', ['--version']).status === 0;
}

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}

/** A Redis of the test's own on a free loopback port, nothing on disk: one the test may kill and restart. */
export interface ThrowawayRedis {
  url: string;
  stop(): Promise<void>;
  start(): Promise<void>;
}

export async function throwawayRedis(): Promise<ThrowawayRedis> {
  const port = await freePort();
  let child: ChildProcess | undefined;
  const start = async (): Promise<void> => {
    const started = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    child = started;
    await new Promise<void>((resolve, reject) => {
      let output = '';
      started.stdout?.on('data', (chunk: Buffer) => {
        output += chunk.toString();
        if (output.includes('Ready to accept connections')) resolve();
      });
      started.once('exit', (code) => reject(new Error(`redis-server exited (${code}): ${output}`)));
    });
  };
  await start();
  return {
    url: `redis://127.0.0.1:${port}`,
    start,
    stop: () =>
      new Promise<void>((resolve) => {
        const running = child;
        if (!running || running.exitCode !== null || running.signalCode !== null) return resolve();
        running.once('exit', () => resolve());
        running.kill('SIGKILL');
      }),
  };
}
