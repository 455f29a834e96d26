import { readFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { ipnNotificationSchema, ipnRouter } from 'ipn-kit';
import type { CliIo } from '../../lib/cli/cli-io.js';
import { runCli } from '../../lib/cli/run-cli.js';
import successful from '../fixtures/ipn-successful.json';
import { quiet } from '../helpers/quiet-logger.js';
import { startReceiver, type Receiver } from '../helpers/receiver.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen } from '../helpers/servers.js';

function capture() {
  const stdout: string[] = [];
  const stderr: string[] = [];
  const io: CliIo = { stdout: (line) => stdout.push(line), stderr: (line) => stderr.push(line), env: {} };
  return { io, stdout, stderr };
}

let receiver: Receiver;
afterEach(() => receiver?.close());

async function send(...args: string[]) {
  const { io, stdout, stderr } = capture();
  const code = await runCli(['send', ...args], io);
  return { code, stdout, stderr };
}

/** An endpoint that answers 200 and writes its body for as long as the client reads it. */
async function startEndlessAnswer() {
  let written = 0;
  let onClosed!: () => void;
  const closed = new Promise<void>((resolve) => (onClosed = resolve));
  const server = http.createServer((req, res) => {
    req.resume();
    res.writeHead(200, { 'content-type': 'text/plain' });
    const chunk = Buffer.alloc(16 * 1024, 'x');
    const pump = (): void => {
      while (!res.destroyed && res.write(chunk)) written += chunk.length;
    };
    res.on('drain', pump);
    res.on('close', () => {
      server.close();
      onClosed();
    });
    pump();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}/ipn`, closed, written: () => written };
}

describe('ipn-kit send', () => {
  test('POSTs one realistic SUCCESSFUL notification, prints the answer, exits 0', async () => {
    receiver = await startReceiver();

    const result = await send(`${receiver.url}/ipn`);

    expect(result.code).toBe(0);
    expect(receiver.bodies).toHaveLength(1);
    const body = receiver.bodies[0]!;
    expect(Object.keys(body)).toEqual(Object.keys(successful));
    expect(body).toMatchObject({
      state: 'SUCCESSFUL',
      amount: 5000,
      response: 'operation success',
      error: '',
    });
    expect(body.transaction_id).toMatch(/^CLI\.\d{9}$/);
    expect(ipnNotificationSchema.safeParse(body).success).toBe(true);
    expect(result.stdout).toEqual([
      `POST ${receiver.url}/ipn: ${body.transaction_id} SUCCESSFUL amount 5000, once`,
      '#1 200 {"ok":true}',
      '1 sent: 1 answered 2xx, 0 did not',
    ]);
    expect(result.stderr).toEqual([]);
  });

  test('--state, --custom-data, --transaction-id and --amount set the notification fields', async () => {
    receiver = await startReceiver();

    const result = await send(
      `${receiver.url}/ipn`,
      '--state',
      'FAILED',
      '--custom-data',
      '{"orderId":"order-9"}',
      '--transaction-id',
      'EFB.000042',
      '--amount=1200',
    );

    expect(result.code).toBe(0);
    expect(receiver.bodies[0]).toMatchObject({
      transaction_id: 'EFB.000042',
      state: 'FAILED',
      custom_data: '{"orderId":"order-9"}',
      amount: 1200,
      response: '',
      error: 'insufficient balance',
    });
  });

  test('--repeat 3 sends the same notification three times, one after another', async () => {
    receiver = await startReceiver();

    const result = await send(`${receiver.url}/ipn`, '--repeat', '3');

    expect(result.code).toBe(0);
    expect(receiver.bodies).toHaveLength(3);
    expect(new Set(receiver.bodies.map((body) => JSON.stringify(body))).size).toBe(1);
    expect(receiver.maxInFlight()).toBe(1);
    expect(result.stdout.slice(1)).toEqual([
      '#1 200 {"ok":true}',
      '#2 200 {"ok":true}',
      '#3 200 {"ok":true}',
      '3 sent: 3 answered 2xx, 0 did not',
    ]);
  });

  test('--repeat 3 --concurrent sends the three copies at once', async () => {
    receiver = await startReceiver({ holdUntil: 3 });

    const result = await send(`${receiver.url}/ipn`, '--repeat', '3', '--concurrent');

    expect(result.code).toBe(0);
    expect(receiver.bodies).toHaveLength(3);
    expect(receiver.maxInFlight()).toBe(3);
    expect(result.stdout[0]).toMatch(/3 times, all at once$/);
  });

  test('a non-2xx answer is printed and exits 1', async () => {
    receiver = await startReceiver({ otherwise: 503 });

    const result = await send(`${receiver.url}/ipn`, '--repeat', '2');

    expect(result.code).toBe(1);
    expect(result.stdout.slice(1)).toEqual([
      '#1 503 {"ok":false}',
      '#2 503 {"ok":false}',
      '2 sent: 0 answered 2xx, 2 did not',
    ]);
  });

  test('no answer at all (nothing listens) is printed as an error and exits 1', async () => {
    receiver = await startReceiver();
    await receiver.close();

    const result = await send(`${receiver.url}/ipn`);

    expect(result.code).toBe(1);
    expect(result.stdout[1]).toMatch(/^#1 error: .*ECONNREFUSED/);
  });

  test('a redirect is not followed: the 3xx is printed as not delivered and exits 1', async () => {
    const ipn = ipnRouter({ logger: quiet });
    const events = recordEvents(ipn);
    const app = express();
    app.post('/moved', (_req, res) => res.redirect(301, '/ipn'));
    app.use('/ipn', ipn); // it answers a GET 200: a followed redirect would look delivered
    const host = await listen(app);
    try {
      const result = await send(`${host.url}/moved`);

      expect(result.code).toBe(1);
      expect(result.stdout.slice(1)).toEqual([
        '#1 301 a redirect to /ipn, not followed: nothing was delivered',
        '1 sent: 0 answered 2xx, 1 did not',
      ]);
      expect(events.names()).toEqual([]);
    } finally {
      await host.close();
    }
  });

  test('an endless answer is read only up to its cap, and the connection is closed', async () => {
    const endless = await startEndlessAnswer();

    const result = await send(endless.url);
    await endless.closed;

    expect(result.code).toBe(0);
    expect(result.stdout[1]).toBe(`#1 200 ${'x'.repeat(200)}...`);
    expect(endless.written()).toBeLessThan(64 * 1024 * 1024);
  });

  test('--token (or --secret) sends the address ipnUrl() builds: a router with that secret answers 200', async () => {
    const secret = 'a-secret-of-at-least-16-chars';
    const ipn = ipnRouter({ secret, logger: quiet });
    const events = recordEvents(ipn);
    const host = await listen(ipn);
    try {
      const without = await send(`${host.url}/ipn`);
      const withToken = await send(`${host.url}/ipn`, '--token', secret);
      const withSecret = await send(`${host.url}/ipn?token=stale`, '--secret', secret);

      expect([without.code, withToken.code, withSecret.code]).toEqual([1, 0, 0]);
      expect(without.stdout[1]).toMatch(/^#1 401 /);
      expect(withToken.stdout[0]).toMatch(new RegExp(`^POST ${host.url}/ipn\\?token=\\*\\*\\*: `));
      expect([...withToken.stdout, ...withSecret.stdout].join('\n')).not.toContain(secret);
      expect(events.names()).toEqual(['invalid', 'notification', 'successful', 'notification', 'successful']);
    } finally {
      await host.close();
    }
  });

  test('--field NAME=VALUE sets any field: JSON values as JSON, other text as text', async () => {
    receiver = await startReceiver();

    const result = await send(
      `${receiver.url}/ipn`,
      '--field',
      'currency=XOF',
      '--field',
      'fee=25',
      '--field',
      'p_id="7"',
      '--field',
      'hash=null',
      '--field',
      'note=a=b',
      '--field=__proto__={"polluted":true}',
    );

    expect(result.code).toBe(0);
    const body = receiver.bodies[0]!;
    expect(body).toMatchObject({ currency: 'XOF', fee: 25, p_id: '7', hash: null, note: 'a=b' });
    expect(Object.keys(body).slice(0, 3)).toEqual(Object.keys(successful).slice(0, 3)); // the rest unchanged
    expect(Object.hasOwn(body, '__proto__')).toBe(true); // sent as a field, to test a receiver's guard
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  test('--version prints the version of package.json and exits 0', async () => {
    const { io, stdout } = capture();
    const { version } = JSON.parse(readFileSync(path.join(__dirname, '../../package.json'), 'utf8')) as {
      version: string;
    };

    expect(await runCli(['--version'], io)).toBe(0);
    expect(stdout).toEqual([version]);
    expect(version).toMatch(/^\d+\.\d+\.\d+/);
  });

  test('--help prints the usage and exits 0', async () => {
    const result = await send('--help');

    expect(result.code).toBe(0);
    expect(result.stdout[0]).toMatch(/^usage: ipn-kit send <url>/);
  });

  test.each([
    [[], /the <url> to send to is missing/],
    [['http://127.0.0.1:9/ipn', '--bogus'], /^ipn-kit send: Unknown option '--bogus'/],
    [['ftp://127.0.0.1/ipn'], /<url> must be an http\(s\) URL/],
    [['http://127.0.0.1:9/a', 'http://127.0.0.1:9/b'], /one <url> only/],
    [['http://127.0.0.1:9/ipn', '--state', 'PENDING'], /--state must be SUCCESSFUL or FAILED, got 'PENDING'/],
    [['http://127.0.0.1:9/ipn', '--repeat', 'abc'], /--repeat must be a number, got 'abc'/],
    [['http://127.0.0.1:9/ipn', '--repeat', '0'], /--repeat must be a whole number from 1 to 1000/],
    [['http://127.0.0.1:9/ipn', '--amount', '12x'], /--amount must be a number, got '12x'/],
    [['http://127.0.0.1:9/ipn', '--transaction-id', 'a b'], /--transaction-id must be a token/],
    [['http://127.0.0.1:9/ipn', '--field', 'currency'], /--field must be NAME=VALUE/],
    [['http://127.0.0.1:9/ipn', '--field', '=XOF'], /--field must be NAME=VALUE/],
    [['http://127.0.0.1:9/ipn', '--token', 'a', '--secret', 'b'], /--token and --secret are the same thing/],
  ])('usage error %j exits 2 with a message on stderr', async (args, message) => {
    const result = await send(...args);

    expect(result.code).toBe(2);
    expect(result.stdout).toEqual([]);
    expect(result.stderr.join('\n')).toMatch(message);
    expect(result.stderr.join('\n')).toMatch(/^ipn-kit send: /);
  });
});
