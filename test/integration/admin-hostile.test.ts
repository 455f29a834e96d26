import express from 'express';
import { connect } from 'node:net';
import { Pool } from 'pg';
import { ipnRouter, type IpnRouter, type Logger } from '../../lib/index.js';
import { adminRouter } from '../../lib/admin.js';
import { PostgresStore } from '../../lib/postgres.js';
import { MemoryInbox } from '../helpers/memory-inbox.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { listen, type Running } from '../helpers/servers.js';
import { databaseUrl, describeWithService, eventually } from '../helpers/services.js';

// Bad input to every page and form of the operator's page: a documented 4xx page, never a 500, never a
// crash; what fails underneath is logged and answered 503.

/** A logger that keeps its error lines. */
function recordingLogger(): Logger & { errors: string[] } {
  const errors: string[] = [];
  return { ...quiet, errors, error: (_object, message) => errors.push(message) };
}

/** The CSRF cookie a first GET hands out, and the token in it. */
async function csrfOf(url: string): Promise<{ cookie: string; token: string }> {
  const answer = await fetch(`${url}/confirm?action=replay-dead`);
  const cookie = (answer.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
  return { cookie, token: cookie.split('=')[1] ?? '' };
}

const post = (url: string, cookie: string, body: string) =>
  fetch(url, {
    method: 'POST',
    headers: { cookie, 'content-type': 'application/x-www-form-urlencoded' },
    body,
  });

/** Sends a raw request line (one `fetch` would refuse to send) and returns the status line's code. */
function rawStatus(port: string, target: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), '127.0.0.1', () =>
      socket.write(`GET ${target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`),
    );
    let answer = '';
    socket.on('data', (chunk: Buffer) => (answer += chunk.toString()));
    socket.on('end', () => resolve(Number(/^HTTP\/1\.1 (\d+)/.exec(answer)?.[1])));
    socket.on('error', reject);
  });
}

describeWithService('PostgreSQL', 'the operator page against hostile input, on PostgreSQL', () => {
  let pool: Pool;
  let ipn: IpnRouter;
  let server: Running;
  const logger = recordingLogger();
  const table = `admin_hostile_${process.pid}_${Date.now()}`;
  const entry = uniquePayload({ custom_data: 'order-1' });
  const key = `${String(entry.transaction_id)}:${String(entry.state)}`;

  beforeAll(async () => {
    pool = new Pool({ connectionString: databaseUrl() });
    const store = new PostgresStore({ pool, table });
    await store.migrate();
    ipn = ipnRouter({ store, delivery: 'at-least-once', logger: quiet });
    ipn.on('successful', () => {});
    const app = express();
    app.use('/ipn', ipn);
    app.use('/ops', adminRouter({ ipn, authorize: () => true, logger }));
    server = await listen(app);
    const answer = await fetch(`${server.url}/ipn`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(entry),
    });
    expect(answer.status).toBe(200);
    await eventually('delivered', async () => (await ipn.inbox.get(key))?.status === 'delivered');
  });

  afterAll(async () => {
    await server?.close();
    await ipn?.close();
    await pool?.query(`DROP TABLE IF EXISTS "${table}"`);
    await pool?.end();
  });

  test.each([
    '/?status=%00',
    '/?transaction=%00',
    '/?q=%00',
    '/?q=a%00b&page=2',
    '/?from=%00',
    '/entry?key=%00',
    `/entry?key=${encodeURIComponent(key)}%00`,
    '/confirm?action=replay&key=%00',
    '/confirm?action=reconcile&transaction=%00',
    '/?%00=1',
  ])('GET %s (a NUL, which PostgreSQL refuses) answers 400 with a page that says why', async (path) => {
    const answer = await fetch(`${server.url}/ops${path}`);
    expect(answer.status).toBe(400);
    expect(answer.headers.get('content-type')).toMatch(/^text\/html/);
    expect(await answer.text()).toMatch(/no notification can hold/);
  });

  test.each([
    ['/?page=-1', 200],
    ['/?page=abc', 200],
    ['/?page=1e400', 200],
    ['/?page=99999999999999999999', 200],
    ['/?status=nope&status=dead', 200],
    ['/?q=%25%25_', 200],
    ['/?q=%ED%A0%80', 200],
    ['/?transaction=' + 'x'.repeat(4000), 200],
    ['/?from=0000-01-01&to=9999-12-31', 200],
    ['/?from=2026-02-31&to=275760-09-13', 200],
    ['/?from=-0001-01-01&to=%zz', 200],
    ['/entry', 404],
    ['/entry?key=%E0%A4%A', 404],
    ['/confirm?action=__proto__', 400],
    ['/confirm?action=constructor', 400],
    ['/%zz', 404],
  ])('GET %s answers %d, never a 500', async (path, status) => {
    const answer = await fetch(`${server.url}/ops${path}`);
    expect(answer.status).toBe(status);
    await answer.text();
  });

  test('a request target that is no URL answers 400, not 500', async () => {
    expect(await rawStatus(new URL(server.url).port, '/ops//[')).toBe(400);
    expect(await rawStatus(new URL(server.url).port, '/ops/?q=%00')).toBe(400);
  });

  test('forms with a NUL answer 400 and change nothing; odd but harmless forms get their documented answer', async () => {
    const { cookie, token } = await csrfOf(`${server.url}/ops`);
    const at = (path: string) => `${server.url}/ops${path}`;
    for (const [path, body] of [
      ['/replay', `key=%00`],
      ['/replay', `key=${encodeURIComponent(key)}%00`],
      ['/reconcile', 'transaction=%00'],
      ['/purge', 'before=2026-01-01%00'],
      ['/replay-dead', '%00=1'],
    ] as const) {
      const answer = await post(at(path), cookie, `csrf=${token}&${body}`);
      expect([path, answer.status]).toEqual([path, 400]);
    }
    expect((await ipn.inbox.get(key))?.status).toBe('delivered');
    expect((await post(at('/replay'), cookie, `csrf=${token}`)).status).toBe(409);
    expect((await post(at('/replay'), cookie, `csrf=${token}&key=a&key=b`)).status).toBe(409);
    expect((await post(at('/purge'), cookie, `csrf=${token}&before=garbage`)).status).toBe(409);
    expect((await post(at('/purge'), cookie, `csrf=${token}&before=2026-02-31`)).status).toBe(409);
    expect((await post(at('/reconcile'), cookie, `csrf=${token}&transaction=`)).status).toBe(409);
    expect((await post(at('/nope'), cookie, `csrf=${token}`)).status).toBe(404);
    expect((await post(at('/replay'), cookie, 'x'.repeat(10_000))).status).toBe(413);
    expect((await post(at('/replay'), cookie, `csrf=%zz${token}&key=${key}`)).status).toBe(403);
    expect((await post(at('/replay'), cookie, `csrf=other&csrf=${token}&key=${key}`)).status).toBe(403);
    expect((await ipn.inbox.get(key))?.status).toBe('delivered');
    expect(logger.errors).toEqual([]);
  });
});

describe('when the store fails under the operator page', () => {
  const running: Running[] = [];
  const routers: IpnRouter[] = [];
  afterEach(async () => {
    await Promise.all(running.splice(0).map((server) => server.close()));
    await Promise.all(routers.splice(0).map((router) => router.close()));
  });

  test('a list that throws answers 503 with a page and Retry-After, logs it once, and the app lives on', async () => {
    const inbox = new MemoryInbox();
    const ipn = ipnRouter({ store: inbox, delivery: 'at-least-once', logger: quiet });
    routers.push(ipn);
    const logger = recordingLogger();
    const app = express();
    app.use('/ops', adminRouter({ ipn, authorize: () => true, logger }));
    const server = await listen(app);
    running.push(server);
    inbox.list = () => Promise.reject(new Error('connection terminated unexpectedly'));
    const answer = await fetch(`${server.url}/ops/`);
    expect(answer.status).toBe(503);
    expect(answer.headers.get('retry-after')).toBe('5');
    expect(answer.headers.get('content-type')).toMatch(/^text\/html/);
    expect(await answer.text()).toMatch(/could not be read or changed/);
    expect(logger.errors).toHaveLength(1);
    expect(logger.errors[0]).toMatch(/could not be built/);
    expect((await fetch(`${server.url}/ops/admin.css`)).status).toBe(200);
  });

  test('an action whose store throws a plain error answers 409 and logs what the page calls "the application log"', async () => {
    const inbox = new MemoryInbox();
    const ipn = ipnRouter({ store: inbox, delivery: 'at-least-once', logger: quiet });
    routers.push(ipn);
    const logger = recordingLogger();
    const app = express();
    app.use('/ops', adminRouter({ ipn, authorize: () => true, logger }));
    const server = await listen(app);
    running.push(server);
    const { cookie, token } = await csrfOf(`${server.url}/ops`);
    // Replaying the dead entries reads them first (the bulk replay's list), then replays each.
    inbox.list = () => Promise.reject(new Error('disk full'));
    const answer = await post(`${server.url}/ops/replay-dead`, cookie, `csrf=${token}`);
    expect(answer.status).toBe(409);
    expect(await answer.text()).toMatch(/see the application log/);
    expect(logger.errors).toEqual(['ipn-kit admin: an action failed']);
  });

  test('an action whose PostgresStore fails (a StoreError, not a plain error) is logged too', async () => {
    // The stores reject with StoreError now, an IpnKitError: an action that failed underneath must still
    // reach the log the operator is sent to, with the driver's message.
    const lost = Object.assign(new Error('terminating connection due to administrator command'), {
      code: '57P01',
    });
    const pool = { query: () => Promise.reject(lost) };
    const ipn = ipnRouter({ store: new PostgresStore({ pool }), delivery: 'at-least-once', logger: quiet });
    routers.push(ipn);
    const logged: Array<{ object: unknown; message: string }> = [];
    const logger = {
      ...quiet,
      error: (object: unknown, message: string) => void logged.push({ object, message }),
    };
    const app = express();
    app.use('/ops', adminRouter({ ipn, authorize: () => true, logger }));
    const server = await listen(app);
    running.push(server);
    const { cookie, token } = await csrfOf(`${server.url}/ops`);
    const answer = await post(`${server.url}/ops/replay-dead`, cookie, `csrf=${token}`);
    expect(answer.status).toBe(409);
    expect(await answer.text()).toMatch(/IPN_STORE_FAILED/);
    expect(logged).toEqual([
      {
        object: expect.objectContaining({
          err: expect.objectContaining({
            message: expect.stringMatching(/terminating connection/),
          }) as unknown,
        }) as unknown,
        message: 'ipn-kit admin: an action failed',
      },
    ]);
  });

  test('a logger without error() is a TypeError at construction', () => {
    const ipn = ipnRouter({ logger: quiet });
    routers.push(ipn);
    expect(() => adminRouter({ ipn, authorize: () => true, logger: {} as never })).toThrow(
      /logger must have a debug\(\) method/,
    );
  });
});
