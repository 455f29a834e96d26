import type { IncomingMessage, ServerResponse } from 'node:http';
import Fastify, { type FastifyInstance } from 'fastify';
import Fastify4 from 'fastify4';
import { ipnRouter, type IpnEvents, type IpnRouter, type Options } from '../../lib/index.js';
import { ipnPlugin } from '../../lib/fastify.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, settle } from '../helpers/servers.js';
import { until } from '../helpers/until.js';

const SECRET = 'a-secret-of-at-least-16-chars';
const LIMIT = 2048;

/** One request of the table: what to send, with which router options, and what every adapter must do. */
interface Row {
  name: string;
  options?: Partial<Options<undefined>>;
  method: string;
  query?: string;
  contentType?: string;
  /** The body; a function for a body that must differ per row run (a unique notification). */
  body?: string | (() => string);
  /** Sent once before the request answered here (the first copy of a resend). */
  before?: 'same-body';
  /** Close the router before the request. */
  closed?: true;
  status: number;
  /** The JSON body, or `null` for none (HEAD). `error` alone is compared for error answers. */
  answer: Record<string, unknown> | null;
  headers?: Record<string, string>;
  events: Array<keyof IpnEvents>;
}

const notification = () => JSON.stringify(uniquePayload());

const ROWS: Row[] = [
  { name: 'GET is a liveness ping', method: 'GET', status: 200, answer: { ok: true }, events: [] },
  { name: 'HEAD answers with no body', method: 'HEAD', status: 200, answer: null, events: [] },
  {
    name: 'another method is 405 with Allow',
    method: 'PUT',
    body: '{}',
    status: 405,
    answer: { error: 'method_not_allowed' },
    headers: { allow: 'GET, HEAD, POST' },
    events: [],
  },
  {
    name: 'a multipart body is 415',
    method: 'POST',
    contentType: 'multipart/form-data; boundary=x',
    body: '--x--',
    status: 415,
    answer: { error: 'unsupported_media_type' },
    events: ['invalid'],
  },
  {
    name: 'a body over the limit is 413',
    options: { limit: LIMIT },
    method: 'POST',
    body: JSON.stringify({ padding: 'x'.repeat(LIMIT) }),
    status: 413,
    answer: { error: 'body_too_large' },
    events: ['invalid'],
  },
  {
    name: 'malformed JSON is 400',
    method: 'POST',
    body: '{"transaction_id": ',
    status: 400,
    answer: { error: 'malformed_body' },
    events: ['invalid'],
  },
  {
    name: 'a record with missing fields is 400',
    method: 'POST',
    body: '{"transaction_id":"T1"}',
    status: 400,
    answer: { error: 'invalid_fields' },
    events: ['invalid'],
  },
  {
    name: 'a first notification is 200 and delivered',
    method: 'POST',
    body: notification,
    status: 200,
    answer: { ok: true },
    events: ['notification', 'successful'],
  },
  {
    name: 'a resend is 200 duplicate',
    method: 'POST',
    body: notification,
    before: 'same-body',
    status: 200,
    answer: { ok: true, duplicate: true },
    events: ['notification', 'successful', 'duplicate'],
  },
  {
    name: 'a wrong address token is 401',
    options: { secret: SECRET },
    method: 'POST',
    query: '?token=not-the-secret',
    body: notification,
    status: 401,
    answer: { error: 'unauthorized' },
    events: ['invalid'],
  },
  {
    name: 'after close() a notification is 503 with Retry-After',
    method: 'POST',
    body: notification,
    closed: true,
    status: 503,
    answer: { error: 'closed' },
    headers: { 'retry-after': '30' },
    events: [],
  },
  {
    name: 'an authenticate that throws is 500',
    options: {
      authenticate: () => {
        throw new Error('a bug in authenticate');
      },
    },
    method: 'POST',
    body: notification,
    status: 500,
    answer: { error: 'internal_error' },
    events: ['error'],
  },
];

/** What a client sees of an answer: the status, the relevant headers, the JSON body. */
interface Seen {
  status: number;
  /** The body as sent, '' for none. */
  text: string;
  headers: Record<string, string | null>;
  body: Record<string, unknown> | null;
}

interface Sent {
  method: string;
  query: string;
  contentType: string | undefined;
  body: string | undefined;
}

/** A transport under test: serves a router, sends it a request, stops. */
interface Adapter {
  name: string;
  start(ipn: IpnRouter): Promise<{ send(request: Sent): Promise<Seen>; stop(): Promise<void> }>;
}

const HEADERS = ['content-type', 'content-length', 'allow', 'retry-after'];

async function seen(response: Response): Promise<Seen> {
  const text = await response.text();
  const headers: Record<string, string | null> = {};
  for (const name of HEADERS) headers[name] = response.headers.get(name);
  return {
    status: response.status,
    text,
    headers,
    body: text === '' ? null : (JSON.parse(text) as Record<string, unknown>),
  };
}

function init({ method, contentType, body }: Sent): RequestInit {
  return {
    method,
    headers: contentType === undefined ? {} : { 'content-type': contentType },
    body: method === 'GET' || method === 'HEAD' ? undefined : body,
  };
}

/** Over loopback HTTP, to a server started by `listenOn`; `base` is the route's address. */
async function overHttp(listenOn: () => Promise<{ base: string; stop: () => Promise<void> }>) {
  const { base, stop } = await listenOn();
  return { send: async (request: Sent) => seen(await fetch(base + request.query, init(request))), stop };
}

/** The platform's `waitUntil`, a method reading its `this` as a Worker's does; keeps what it was handed. */
class Platform {
  readonly handed: Array<Promise<unknown>> = [];
  waitUntil(promise: Promise<unknown>): void {
    this.handed.push(promise);
  }
}

const platforms = new WeakMap<IpnRouter, Platform>();

/** A Fastify app serving the plugin at /ipn. */
async function fastifyServing(app: FastifyInstance, ipn: IpnRouter) {
  await app.register(ipnPlugin, { prefix: '/ipn', router: ipn });
  const address = await app.listen({ port: 0, host: '127.0.0.1' });
  return { base: `${address}/ipn`, stop: () => app.close() };
}

const ADAPTERS: Adapter[] = [
  {
    name: 'node:http',
    start: (ipn) =>
      overHttp(async () => {
        const running = await listen(ipn);
        return { base: `${running.url}/ipn`, stop: running.close };
      }),
  },
  {
    name: 'fetch',
    start: (ipn) => {
      const platform = new Platform();
      platforms.set(ipn, platform);
      return Promise.resolve({
        send: async (request) =>
          seen(
            await ipn.fetch(new Request(`https://shop.example/ipn${request.query}`, init(request)), platform),
          ),
        stop: () => Promise.resolve(),
      });
    },
  },
  { name: 'Fastify 5', start: (ipn) => overHttp(() => fastifyServing(Fastify(), ipn)) },
  {
    name: 'Fastify 4',
    start: (ipn) => overHttp(() => fastifyServing(Fastify4() as unknown as FastifyInstance, ipn)),
  },
];

const JSON_TYPE = 'application/json; charset=utf-8';

describe.each(ADAPTERS)('the $name adapter answers as the others do', (adapter) => {
  test.each(ROWS)('$name', async (row) => {
    const ipn = ipnRouter({ logger: quiet, ...row.options });
    const recorder = recordEvents(ipn);
    const served = await adapter.start(ipn);
    try {
      const body = typeof row.body === 'function' ? row.body() : row.body;
      const request: Sent = {
        method: row.method,
        query: row.query ?? '',
        contentType: body === undefined ? undefined : (row.contentType ?? 'application/json'),
        body,
      };
      if (row.before === 'same-body') expect((await served.send(request)).status).toBe(200);
      if (row.closed) await ipn.close();

      const answer = await served.send(request);

      expect(answer.status).toBe(row.status);
      // HEAD sends no body, but the length of the one GET gets.
      const length = row.method === 'HEAD' ? '{"ok":true}'.length : Buffer.byteLength(answer.text);
      expect(answer.headers).toEqual({
        'content-type': JSON_TYPE,
        'content-length': String(length),
        allow: null,
        'retry-after': null,
        ...row.headers,
      });
      if (row.answer === null) expect(answer.body).toBeNull();
      else expect(answer.body).toMatchObject(row.answer);
      await until(() => recorder.events.length >= row.events.length, `${row.events.join(', ')}`);
      await settle();
      expect(recorder.names()).toEqual(row.events);
    } finally {
      await served.stop();
      await ipn.close();
    }
  });
});

describe('the work after the answer is tracked the same way', () => {
  test("fetch hands waitUntil, as a method, a promise that waits for a listener's promise", async () => {
    const ipn = ipnRouter({ logger: quiet });
    let release = (): void => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    let finished = false;
    ipn.on('successful', async () => {
      await held;
      finished = true;
    });
    const platform = new Platform();
    const request = new Request('https://shop.example/ipn', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: notification(),
    });

    const response = await ipn.fetch(request, platform);

    expect(response.status).toBe(200);
    expect(platform.handed).toHaveLength(1);
    let settled = false;
    void platform.handed[0]?.then(() => (settled = true));
    await settle();
    expect(settled).toBe(false);
    release();
    await platform.handed[0];
    expect(finished).toBe(true);
    await ipn.close();
  });

  test.each(ROWS.filter((row) => !row.closed))(
    'fetch hands waitUntil exactly one promise: $name',
    async (row) => {
      const ipn = ipnRouter({ logger: quiet, ...row.options });
      const recorder = recordEvents(ipn);
      const fetchAdapter = ADAPTERS.find((candidate) => candidate.name === 'fetch');
      const served = await fetchAdapter!.start(ipn);
      const body = typeof row.body === 'function' ? row.body() : row.body;
      const request: Sent = {
        method: row.method,
        query: row.query ?? '',
        contentType: body === undefined ? undefined : (row.contentType ?? 'application/json'),
        body,
      };
      if (row.before === 'same-body') await served.send(request);
      const platform = platforms.get(ipn);
      const handedBefore = platform?.handed.length ?? 0;

      await served.send(request);

      expect(platform?.handed.length).toBe(handedBefore + 1);
      // Once the promise settles, every event of the request was emitted: nothing is left to wait for.
      await Promise.all(platform?.handed ?? []);
      expect(recorder.names()).toEqual(row.events);
      await ipn.close();
    },
  );
});

describe('a body something else already read', () => {
  test.each([
    [
      'node:http',
      async (ipn: IpnRouter) => {
        const running = await listen(async (req: IncomingMessage, res: ServerResponse) => {
          for await (const chunk of req) void chunk; // a host middleware that drains the stream
          ipn(req, res);
        });
        try {
          return await seen(
            await fetch(
              running.url,
              init({ method: 'POST', query: '', contentType: 'application/json', body: notification() }),
            ),
          );
        } finally {
          await running.close();
        }
      },
    ],
    [
      'fetch',
      async (ipn: IpnRouter) => {
        const request = new Request(
          'https://shop.example/ipn',
          init({ method: 'POST', query: '', contentType: 'application/json', body: notification() }),
        );
        await request.text(); // the host's code read it first
        return seen(await ipn.fetch(request));
      },
    ],
  ])('%s answers 500 body_unavailable and emits error', async (_name, drive) => {
    const ipn = ipnRouter({ logger: quiet });
    const recorder = recordEvents(ipn);

    const answer = await drive(ipn);

    expect(answer).toMatchObject({ status: 500, body: { error: 'body_unavailable' } });
    expect(answer.headers['content-type']).toBe(JSON_TYPE);
    await until(() => recorder.events.length >= 1, 'the error event');
    expect(recorder.names()).toEqual(['error']);
    await ipn.close();
  });
});
