import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  createStatusClient,
  ipnRouter,
  StatusQueryError,
  VerificationError,
  type Logger,
} from '../../lib/index.js';
import type { StatusClientOptions } from '../../lib/status/status-client.js';
import { uniquePayload } from '../helpers/payloads.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, type Running } from '../helpers/servers.js';
import { until } from '../helpers/until.js';

const API_KEY = 'sk-live-9f8e7d6c5b4a39281706';
const ID = 'EFB.001158';

/** Everything the suite's clients and routers logged, threw or emitted: searched for the key at the end. */
const output: unknown[] = [];
const capture: Logger = {
  debug: (object, message) => void output.push(['debug', message, object]),
  info: (object, message) => void output.push(['info', message, object]),
  warn: (object, message) => void output.push(['warn', message, object]),
  error: (object, message) => void output.push(['error', message, object]),
};

/** A loopback HTTP server that misbehaves as told; it counts requests, bodies and bytes it wrote. */
interface Hostile {
  url: string;
  requests: string[];
  written: number;
  closed: number;
  close: () => Promise<void>;
}

const opened: Array<{ close: () => Promise<void> }> = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((server) => server.close()));
});

async function hostile(handle: (res: ServerResponse, state: Hostile) => void): Promise<Hostile> {
  const state: Hostile = { url: '', requests: [], written: 0, closed: 0, close: async () => {} };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      state.requests.push(body);
      res.on('close', () => (state.closed += 1));
      const write = res.write.bind(res);
      res.write = ((chunk: string | Buffer, ...rest: unknown[]) => {
        state.written += Buffer.byteLength(chunk);
        return (write as (...args: unknown[]) => boolean)(chunk, ...rest);
      }) as typeof res.write;
      handle(res, state);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/api_v1/transaction`;
  state.close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  opened.push(state);
  return state;
}

function client(baseUrl: string, options: Partial<StatusClientOptions> = {}) {
  return createStatusClient({ baseUrl, apiKey: API_KEY, logger: capture, retryDelayMs: 1, ...options });
}

async function failure(promise: Promise<unknown>): Promise<StatusQueryError> {
  try {
    await promise;
  } catch (error) {
    output.push(described(error));
    if (error instanceof StatusQueryError) return error;
    throw error;
  }
  throw new Error('expected the status query to fail');
}

/** An error as a log line would show it: message, stack, every field, and its causes. */
function described(error: unknown): unknown {
  if (!(error instanceof Error)) return error;
  return { ...error, message: error.message, stack: error.stack, cause: described(error.cause) };
}

/** Writes `chunk` every `ms` until the client goes away. */
function endless(res: ServerResponse, chunk: string, ms: number): void {
  const timer = setInterval(() => {
    if (res.destroyed || res.writableEnded) clearInterval(timer);
    else res.write(chunk);
  }, ms);
  res.on('close', () => clearInterval(timer));
}

describe('the status client against a hostile or broken service', () => {
  describe.each([301, 302, 303, 307, 308])('HTTP %i', (code) => {
    test.each([
      ['with a body', 'Moved: <a href="elsewhere">here</a>'],
      ['without a body', ''],
    ])(
      '%s: never followed, not retried, the Location in the error, the key sent nowhere else',
      async (_, body) => {
        const elsewhere = await hostile((res) =>
          res.end('{"data":{"state":"SUCCESSFUL"},"statut_code":200}'),
        );
        const service = await hostile((res) => {
          res.writeHead(code, { location: `${elsewhere.url}/steal` });
          res.end(body);
        });
        const error = await failure(client(service.url).getStatus(ID));
        expect(error).toMatchObject({ code: 'IPN_STATUS_QUERY_FAILED', retryable: false, httpStatus: code });
        expect(error.location).toBe(`${elsewhere.url}/steal`);
        expect(error.message).toContain(`${elsewhere.url}/steal`);
        expect(service.requests).toHaveLength(1);
        expect(service.requests[0]).toContain(API_KEY); // so that searching the output for it means something
        expect(elsewhere.requests).toHaveLength(0);
      },
    );
  });

  test('a Location that quotes the key is reported without it', async () => {
    const service = await hostile((res) => {
      res.writeHead(307, { location: `http://127.0.0.1:9/steal?key=${API_KEY}` });
      res.end();
    });
    const error = await failure(client(service.url).getStatus(ID));
    expect(error.location).toBe('http://127.0.0.1:9/steal?key=[api key]');
    expect(error.message).not.toContain(API_KEY);
  });

  test('a service message that echoes the key is reported without it', async () => {
    const service = await hostile((res) =>
      res.end(JSON.stringify({ data: null, statut_code: 401, message: `invalid api_key ${API_KEY}` })),
    );
    const error = await failure(client(service.url).getStatus(ID));
    expect(error.serviceMessage).toBe('invalid api_key [api key]');
    expect(error.message).not.toContain(API_KEY);
  });

  test('a never-ending body: the read stops at maxResponseBytes and the connection is dropped', async () => {
    const service = await hostile((res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"data":"');
      endless(res, 'x'.repeat(16_384), 1);
    });
    const error = await failure(client(service.url, { maxResponseBytes: 32_768 }).getStatus(ID));
    expect(error.message).toContain('maxResponseBytes');
    expect(error.retryable).toBe(false);
    await until(() => service.closed === 1, 'the connection to be dropped');
    // What the kernel's socket buffers took before the drop, not an unbounded stream.
    expect(service.written).toBeLessThan(16 * 1024 * 1024);
    expect(service.requests).toHaveLength(1);
  });

  test.each([
    ['with Content-Length', true],
    ['without Content-Length (chunked)', false],
  ])('a huge body %s is refused at the cap', async (_, declared) => {
    const size = 50 * 1024 * 1024;
    const service = await hostile((res) => {
      res.writeHead(200, {
        'content-type': 'application/json',
        ...(declared ? { 'content-length': String(size) } : {}),
      });
      const chunk = 'y'.repeat(65_536);
      let sent = 0;
      const pump = (): void => {
        while (sent < size && !res.destroyed) {
          sent += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', pump);
        }
        if (!res.destroyed) res.end();
      };
      pump();
    });
    const error = await failure(client(service.url).getStatus(ID));
    expect(error.message).toContain('maxResponseBytes (65536 bytes)');
    await until(() => service.closed === 1, 'the connection to be dropped');
    expect(service.written).toBeLessThan(size / 2);
  });

  test('an answer just under the cap is read', async () => {
    const record = uniquePayload({ transaction_id: ID });
    const padding = 'p'.repeat(60_000);
    const service = await hostile((res) =>
      res.end(JSON.stringify({ data: record, statut_code: 200, message: '', padding })),
    );
    await expect(client(service.url).getStatus(ID)).resolves.toMatchObject({ transaction_id: ID });
  });

  test('a body that dribbles in one byte a second fails at timeoutMs, and is retried like a timeout', async () => {
    const service = await hostile((res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      endless(res, ' ', 1_000);
    });
    const error = await failure(client(service.url, { timeoutMs: 300, retries: 1 }).getStatus(ID));
    expect(error.retryable).toBe(true);
    expect(error.message).toContain('timeoutMs');
    expect(service.requests).toHaveLength(2);
  });

  test.each([
    ['http: to a host that is not loopback', 'http://payments.example/api_v1/transaction'],
    ['http: to an address that is not loopback', 'http://10.0.0.7/api_v1/transaction'],
    ['a relative URL', '/api_v1/transaction'],
    ['another scheme', 'ftp://payments.example/api_v1/transaction'],
  ])('baseUrl as %s is refused at construction', (_, baseUrl) => {
    expect(() => createStatusClient({ baseUrl, apiKey: API_KEY })).toThrow(
      /baseUrl must be an (absolute )?https: URL/,
    );
  });

  test.each([
    'https://payments.example/api_v1/transaction',
    'http://127.0.0.1:8080/api_v1/transaction',
    'http://localhost:8080/api_v1/transaction',
    'http://[::1]:8080/api_v1/transaction',
  ])('baseUrl %s is accepted', (baseUrl) => {
    expect(() => createStatusClient({ baseUrl, apiKey: API_KEY })).not.toThrow();
  });

  test('http: to another host is accepted with allowInsecureHttp: true', () => {
    const baseUrl = 'http://payments.example/api_v1/transaction';
    expect(() => createStatusClient({ baseUrl, apiKey: API_KEY, allowInsecureHttp: true })).not.toThrow();
  });
});

describe('verify with a hostile status service', () => {
  const servers: Running[] = [];
  const routers: Array<{ close: () => Promise<void> }> = [];
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((server) => server.close()));
    await Promise.all(routers.splice(0).map((router) => router.close()));
  });

  test.each<[string, (res: ServerResponse) => void]>([
    [
      'a redirect',
      (res) => {
        res.writeHead(307, { location: 'http://127.0.0.1:9/steal' });
        res.end();
      },
    ],
    [
      'a never-ending body',
      (res) => {
        res.writeHead(200);
        endless(res, 'z'.repeat(16_384), 1);
      },
    ],
    [
      'a huge declared body',
      (res) => {
        res.writeHead(200, { 'content-length': String(1024 ** 3) });
        res.write('{');
      },
    ],
  ])(
    '%s: the notification is neither emitted nor lost: retried, then error with it',
    async (_, misbehave) => {
      const service = await hostile(misbehave);
      const ipn = ipnRouter({
        verify: client(service.url),
        logger: capture,
        verifyAttempts: 2,
        verifyRetryDelayMs: 5,
      });
      routers.push(ipn);
      const recorder = recordEvents(ipn);
      ipn.on('error', ({ error }) => void output.push(described(error)));
      const running = await listen(ipn);
      servers.push(running);
      const payload = uniquePayload();
      const answer = await fetch(`${running.url}/`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(payload),
      });
      expect(answer.status).toBe(200);
      await until(() => recorder.count('error') === 1, 'the error event');
      const [event] = recorder.of('error');
      expect(event.error).toBeInstanceOf(VerificationError);
      expect(event.error.cause).toBeInstanceOf(StatusQueryError);
      expect(event.notification).toMatchObject({ transaction_id: payload.transaction_id });
      expect(recorder.count('successful') + recorder.count('notification') + recorder.count('rejected')).toBe(
        0,
      );
      expect(service.requests.length).toBeGreaterThanOrEqual(2);
      output.push(ipn.metrics());
    },
  );
});

afterAll(() => {
  // Every log line, error, event payload and stats the suite produced: the key is in none of them.
  const text = JSON.stringify(output, (_key, value: unknown) =>
    typeof value === 'bigint' ? String(value) : value,
  );
  expect(output.length).toBeGreaterThan(20);
  expect(text).not.toContain(API_KEY);
});
