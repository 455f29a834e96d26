import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { successfulPayload } from '../helpers/payloads.js';

const root = join(__dirname, '../..');
const SECRET = 'quick-start-test-secret-0123456789';

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

/** The quick start's genuine payment: order-1001, initiated for 5000, transaction EFB.001158. */
const genuine = successfulPayload();
/** The same transaction, FAILED: what the service may send after a success. */
const failedAfter = successfulPayload({ state: 'FAILED', response: '', error: 'reversed by the operator' });

/** Runs examples/quick-start.ts as the README tells (`IPN_SECRET=... npx tsx`), until its address is printed. */
async function startQuickStart(children: ChildProcess[]) {
  const port = await freePort();
  const child = spawn(join(root, 'node_modules/.bin/tsx'), ['examples/quick-start.ts'], {
    cwd: root,
    env: { ...process.env, PORT: String(port), IPN_SECRET: SECRET },
  });
  children.push(child);
  const output: string[] = [];
  child.stdout?.on('data', (chunk: Buffer) => output.push(...chunk.toString().split('\n').filter(Boolean)));
  child.stderr?.on('data', (chunk: Buffer) => output.push(...chunk.toString().split('\n').filter(Boolean)));
  await waitForLine(child, output, /IPN endpoint/);
  const post = async (body: unknown, token: string | null = SECRET): Promise<number> => {
    const query = token === null ? '' : `?token=${encodeURIComponent(token)}`;
    const response = await fetch(`http://localhost:${port}/ipn${query}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    await response.arrayBuffer();
    return response.status;
  };
  /**
   * Posts a request that is refused 400, and waits for its log line: the work after every earlier answer
   * (the listeners) has run by then, so what they printed is in `output`.
   */
  const settled = async (): Promise<void> => {
    const refusals = () => output.filter((line) => line.includes('rejected an IPN request: invalid_fields'));
    const before = refusals().length;
    expect(await post({ state: 'SUCCESSFUL' })).toBe(400);
    while (refusals().length === before) {
      if (child.exitCode !== null) throw new Error(`exited with ${child.exitCode}:\n${output.join('\n')}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  };
  return { child, output, post, settled, port };
}

describe('the README quick start (examples/quick-start.ts)', () => {
  const children: ChildProcess[] = [];
  afterEach(() => {
    for (const child of children.splice(0)) child.kill();
  });

  test('prints the IPN address with its token, and logs no unprotected warning', async () => {
    const { output, port } = await startQuickStart(children);
    expect(output).toContain(`IPN endpoint: http://localhost:${port}/ipn?token=${SECRET}`);
    expect(output.filter((line) => line.includes('believes every notification'))).toEqual([]);
  }, 30_000);

  test('refuses forgeries, credits the genuine payment once, and a FAILED after it leaves the order paid', async () => {
    const { output, post, settled } = await startQuickStart(children);

    // Forged: no token, or another one.
    expect(await post(genuine, null)).toBe(401);
    expect(await post(genuine, 'a-guessed-token-of-some-length')).toBe(401);
    // With the token (it leaked): a transaction never expected (ipn.expect() is in use) is answered 503 at
    // most once, never credited; the right one with another amount, or for another order, contradicts its
    // expectation: answered 200 (the service must stop resending) and never credited.
    expect(await post(successfulPayload({ transaction_id: 'EFB.009999' }))).toBe(503);
    expect(await post(successfulPayload({ amount: 50 }))).toBe(200);
    // Another order's custom_data on this transaction.
    expect(await post(successfulPayload({ custom_data: '{"orderId":"order-7"}' }))).toBe(200);
    await settled();
    expect(output.filter((line) => line.startsWith('credit order'))).toEqual([]);

    // The genuine one, then its resend.
    expect(await post(genuine)).toBe(200);
    expect(await post(genuine)).toBe(200);
    // A FAILED of the same transaction after it: answered 200, never undoes the payment.
    expect(await post(failedAfter)).toBe(200);
    await settled();

    expect(output.filter((line) => line.startsWith('credit order'))).toEqual([
      'credit order order-1001: 5000 paid (EFB.001158)',
    ]);
    expect(output.filter((line) => /order order-1001 failed/.test(line))).toEqual([]);
  }, 30_000);

  test('a FAILED after the genuine payment is reported as a conflict, the order still paid', async () => {
    const { output, post, settled } = await startQuickStart(children);
    expect(await post(genuine)).toBe(200);
    expect(await post(failedAfter)).toBe(200);
    await settled();
    expect(output.filter((line) => line.includes('FAILED after SUCCESSFUL: the order stays paid'))).toEqual([
      'EFB.001158 FAILED after SUCCESSFUL: the order stays paid; check it',
    ]);
  }, 30_000);
});
