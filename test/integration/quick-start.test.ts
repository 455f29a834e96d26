import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { failedPayload, successfulPayload } from '../helpers/payloads.js';

const root = join(__dirname, '../..');

/** A port that was free a moment ago: the README's quick start takes its port from PORT. */
function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}

/** Resolves once a line of the child's output matches; fails if the child exits first. */
async function waitForLine(child: ChildProcess, output: string[], pattern: RegExp): Promise<void> {
  while (!output.some((line) => pattern.test(line))) {
    if (child.exitCode !== null) throw new Error(`exited with ${child.exitCode}:\n${output.join('\n')}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('the README quick start (examples/quick-start.ts)', () => {
  let child: ChildProcess | undefined;
  afterEach(() => child?.kill());

  test('credits a notified order once and ignores its resend', async () => {
    const port = await freePort();
    child = spawn(join(root, 'node_modules/.bin/tsx'), ['examples/quick-start.ts'], {
      cwd: root,
      env: { ...process.env, PORT: String(port) },
    });
    const output: string[] = [];
    child.stdout?.on('data', (chunk: Buffer) => output.push(...chunk.toString().split('\n').filter(Boolean)));
    child.stderr?.on('data', (chunk: Buffer) => output.push(chunk.toString()));
    await waitForLine(child, output, /IPN endpoint/);

    const post = () =>
      fetch(`http://localhost:${port}/ipn`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(successfulPayload()),
      });
    expect((await post()).status).toBe(200);
    expect((await post()).status).toBe(200);
    // A later notification's line proves the resend's turn is over: its credit line would have come first.
    const failed = await fetch(`http://localhost:${port}/ipn`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(failedPayload()),
    });
    expect(failed.status).toBe(200);
    await waitForLine(child, output, /order order-1002 failed: insufficient balance/);

    expect(output.filter((line) => line.startsWith('credit order'))).toEqual([
      'credit order order-1001: 5000 paid (EFB.001158)',
    ]);
  }, 30_000);
});
