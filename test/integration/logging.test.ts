import request from 'supertest';
import { ipnRouter, MemoryStore } from '../../lib/index.js';
import { eventually } from '../helpers/services.js';
import { successfulPayload, uniquePayload } from '../helpers/payloads.js';
import { listen, type Running } from '../helpers/servers.js';
import express from 'express';
import { formatLine } from '../../lib/observability/logger.js';

describe('logging', () => {
  let running: Running;
  afterEach(() => running.close());

  test("ipn-kit's log lines never carry the customer's number or name", async () => {
    const lines: string[] = [];
    const record = (level: string) => (object: object, message: string) =>
      void lines.push(`${level} ${message} ${JSON.stringify(object)}`);
    const logger = {
      debug: record('debug'),
      info: record('info'),
      warn: record('warn'),
      error: record('error'),
    };
    const ipn = ipnRouter({ logger, acknowledgeUnprotected: true });
    ipn.on('successful', () => {
      throw new Error('ledger down');
    });
    const app = express();
    app.use('/ipn', ipn);
    running = await listen(app);
    const post = (body: string) =>
      request(running.url).post('/ipn').set('Content-Type', 'application/json').send(body);
    const payload = uniquePayload();

    await post(JSON.stringify(payload)); // accepted, listener fails
    await post(JSON.stringify(payload)); // duplicate
    await post(JSON.stringify(successfulPayload({ transaction_id: 'bad id' }))); // invalid fields
    await post(JSON.stringify(payload).slice(0, -8)); // malformed
    await post('{"customer_name":"Awa Kone" "destination":"0700000001"}'); // V8's syntax error quotes this body

    expect(lines.map((line) => line.split(' ')[0])).toEqual([
      'debug',
      'error',
      'debug',
      'warn',
      'warn',
      'warn',
    ]);
    for (const line of lines) {
      expect(line).not.toContain('0700000001');
      expect(line).not.toContain('Awa Kone');
    }
    expect(lines[1]).toContain(String(payload.transaction_id));
  });

  describe("a listener's error that quotes the customer", () => {
    async function run(logCustomerData?: boolean) {
      const lines: string[] = [];
      const record = (object: object, message: string) =>
        void lines.push(`${message} ${JSON.stringify(object)}`);
      const logger = { debug: record, info: record, warn: record, error: record };
      const ipn = ipnRouter({
        logger,
        logCustomerData,
        acknowledgeUnprotected: true,
      });
      const errors: Error[] = [];
      ipn.on('successful', (n) => {
        throw new Error(`could not credit ${n.customer_name} (${n.destination})`, {
          cause: new Error(`wallet ${n.destination} locked`),
        });
      });
      ipn.on('error', ({ error }) => void errors.push(error));
      running = await listen(ipn);
      const payload = uniquePayload({ customer_name: 'Awa Kone', destination: '0700000001' });
      await request(running.url)
        .post('/')
        .set('Content-Type', 'application/json')
        .send(JSON.stringify(payload));
      return { lines, errors };
    }

    test('is logged with the number and name redacted, by default; the error event keeps them', async () => {
      const { lines, errors } = await run();
      const logged = lines.join('\n');
      expect(logged).toContain('could not credit [redacted] ([redacted])');
      expect(logged).toContain('wallet [redacted] locked');
      expect(logged).not.toContain('0700000001');
      expect(logged).not.toContain('Awa Kone');
      expect(errors[0]?.message).toContain('Awa Kone');
    });

    test('is redacted too when it is a listener of error or invalid that quotes the customer', async () => {
      const lines: string[] = [];
      const record = (object: object, message: string) =>
        void lines.push(`${message} ${JSON.stringify(object)}`);
      const ipn = ipnRouter({
        logger: { debug: record, info: record, warn: record, error: record },
        acknowledgeUnprotected: true,
      });
      ipn.on('successful', () => {
        throw new Error('ledger down');
      });
      ipn.on('error', ({ notification }) => {
        throw new Error(
          `alert failed for ${String(notification?.destination)} ${String(notification?.customer_name)}`,
        );
      });
      ipn.on('invalid', ({ received }) => {
        throw new Error(`bad body from ${JSON.stringify(received)}`);
      });
      running = await listen(ipn);
      const customer = { customer_name: 'Awa Kone', destination: '0700000001' };
      const send = (body: unknown) =>
        request(running.url).post('/').set('Content-Type', 'application/json').send(JSON.stringify(body));
      await send(uniquePayload(customer));
      await send({ ...uniquePayload(customer), transaction_id: 'bad id' });

      const logged = lines.join('\n');
      expect(logged).toContain('alert failed for [redacted] [redacted]');
      expect(logged).toContain('bad body from');
      expect(logged).not.toContain('0700000001');
      expect(logged).not.toContain('Awa Kone');
    });

    test('is logged in clear with logCustomerData: true', async () => {
      const { lines } = await run(true);
      expect(lines.join('\n')).toContain('could not credit Awa Kone (0700000001)');
    });
  });
});

describe('the default logger (no logger option): loud by default', () => {
  let running: Running | undefined;
  let printed: string[];
  let spy: jest.SpyInstance;
  beforeEach(() => {
    printed = [];
    spy = jest.spyOn(console, 'error').mockImplementation((...args: unknown[]) => {
      printed.push(args.map(String).join(' '));
    });
  });
  afterEach(async () => {
    spy.mockRestore();
    await running?.close();
    running = undefined;
  });

  test('prints warnings and errors to stderr, one line each with its level, redacted', async () => {
    const ipn = ipnRouter({ acknowledgeUnprotected: true });
    ipn.on('successful', (n) => {
      throw new Error(`could not credit ${n.customer_name} (${n.destination})`);
    });
    running = await listen(ipn);
    const customer = { customer_name: 'Awa Kone', destination: '0700000001' };
    const send = (body: unknown) =>
      request(running!.url).post('/').set('Content-Type', 'application/json').send(JSON.stringify(body));

    await send({ ...uniquePayload(customer), transaction_id: 'bad id' }); // a warning
    await send(uniquePayload(customer)); // a listener error

    expect(printed).toHaveLength(2);
    expect(printed[0]).toBe(
      '[ipn-kit] WARN rejected an IPN request: invalid_fields ' +
        '{"reason":"invalid_fields","status":400,"fields":["transaction_id"]}',
    );
    // One line: no stack (that is debug's), and the listener's message once, not once per wrapping error.
    expect(printed[1]!.split('\n')).toHaveLength(1);
    expect(printed[1]).toMatch(
      /^\[ipn-kit\] ERROR a listener of 'successful' failed: could not credit \[redacted\] \(\[redacted\]\) \{.*"type":"ListenerError","code":"IPN_LISTENER_FAILED"/,
    );
    expect(printed[1]!.split('could not credit')).toHaveLength(2);
    expect(printed.join('\n')).not.toMatch(/Awa Kone|0700000001/);
  });

  test('at least once, a failed attempt is one line, and a dead notification one more', async () => {
    const ipn = ipnRouter({
      acknowledgeUnprotected: true,
      store: new MemoryStore(),
      delivery: 'at-least-once',
      maxAttempts: 2,
      retryDelayMs: 1,
      // The retry is taken up by a recovery pass: at the default interval the second attempt came just
      // after Jest's 5 s on a loaded CI machine, and the test timed out on what it does not test.
      recoveryIntervalMs: 20,
    });
    ipn.on('successful', async () => {
      await Promise.resolve();
      throw new Error('ledger down: connection refused', { cause: new Error('connection refused') });
    });
    const dead: unknown[] = [];
    ipn.on('dead', (event) => void dead.push(event));
    running = await listen(ipn);
    await request(running.url).post('/').set('Content-Type', 'application/json').send(uniquePayload());
    await eventually('the notification is dead', () => dead.length === 1);

    const lines = printed.flatMap((printedLine) => printedLine.split('\n'));
    expect(lines.map((line) => line.replace(/ \{.*/, ''))).toEqual([
      "[ipn-kit] ERROR a listener of 'successful' failed: ledger down: connection refused",
      "[ipn-kit] ERROR a listener of 'successful' failed: ledger down: connection refused",
      expect.stringMatching(/^\[ipn-kit\] ERROR IPN notification \S+ is dead after 2 attempts$/),
    ]);
    for (const line of lines.slice(0, 2)) expect(line.split('connection refused')).toHaveLength(2);
    await ipn.close();
  });

  test("an app with an error listener owns its errors: the failure is its line, not ipn-kit's", async () => {
    const ipn = ipnRouter({
      acknowledgeUnprotected: true,
      store: new MemoryStore(),
      delivery: 'at-least-once',
      maxAttempts: 1,
    });
    ipn.on('successful', () => {
      throw new Error('ledger down');
    });
    const errors: unknown[] = [];
    ipn.on('error', (event) => void errors.push(event));
    const dead: unknown[] = [];
    ipn.on('dead', (event) => void dead.push(event));
    running = await listen(ipn);
    await request(running.url).post('/').set('Content-Type', 'application/json').send(uniquePayload());
    await eventually('the notification is dead', () => dead.length === 1);

    expect(errors).toHaveLength(1);
    // The dead line stays: it is not an error event, and the app may have no dead listener.
    expect(printed).toEqual([
      expect.stringMatching(/^\[ipn-kit\] ERROR IPN notification \S+ is dead after 1 attempt /),
    ]);
    await ipn.close();
  });

  test('debug and info stay quiet', async () => {
    const ipn = ipnRouter({ acknowledgeUnprotected: true });
    ipn.on('successful', () => {}); // without it, the SUCCESSFUL is a warning: emitted to no listener
    running = await listen(ipn);
    const payload = uniquePayload();
    await request(running.url).post('/').send(payload);
    await request(running.url).post('/').send(payload); // a resend: a debug line

    expect(printed).toEqual([]);
  });
});

describe('formatLine', () => {
  test('never throws on fields JSON cannot print, and keeps the message', () => {
    const circular: Record<string, unknown> = { a: 1 };
    circular.self = circular;
    const hostile = {
      get boom(): never {
        throw new Error('getter');
      },
    };
    expect(formatLine('WARN', { big: 10n, circular }, 'm')).toBe(
      '[ipn-kit] WARN m {"big":"10","circular":{"a":1,"self":"[circular]"}}',
    );
    expect(formatLine('WARN', { hostile }, 'still printed')).toBe(
      '[ipn-kit] WARN still printed {"fields":"(not printable)"}',
    );
    expect(formatLine('WARN', {}, 'no fields')).toBe('[ipn-kit] WARN no fields');
  });
});
