import type { IncomingMessage, ServerResponse } from 'node:http';
import request from 'supertest';
import { ipnRouter } from '../../lib/index.js';
import { uniquePayload } from '../helpers/payloads.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, type Running } from '../helpers/servers.js';
import { quiet } from '../helpers/quiet-logger.js';
import { until } from '../helpers/until.js';

describe('the router without Express: http.createServer(ipn)', () => {
  let running: Running;
  afterEach(() => running.close());

  test('serves notifications on any path, with the same answers and events', async () => {
    const ipn = ipnRouter();
    const recorder = recordEvents(ipn);
    running = await listen(ipn);
    const payload = uniquePayload();

    const first = await request(running.url).post('/callbacks/ipn?source=service').send(payload);
    const resend = await request(running.url).post('/').send(payload);
    const invalid = await request(running.url).post('/').set('Content-Type', 'application/json').send('{');

    expect([first.status, resend.status, invalid.status]).toEqual([200, 200, 400]);
    expect(recorder.names()).toEqual(['notification', 'successful', 'duplicate', 'invalid']);
  });
});

describe('an answer the host app makes impossible to write', () => {
  let running: Running;
  afterEach(() => running.close());

  test('a writeHead that throws (a host hook on the headers) ends the exchange instead of hanging it, and still delivers once', async () => {
    const ipn = ipnRouter({ logger: quiet });
    const recorder = recordEvents(ipn);
    // As on-headers (express-session, compression, response-time) does: the host's hook runs inside writeHead.
    running = await listen((req: IncomingMessage, res: ServerResponse) => {
      res.writeHead = (() => {
        throw new TypeError('a header hook of the host threw');
      });
      ipn(req, res);
    });

    const outcome = await fetch(running.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(uniquePayload()),
      signal: AbortSignal.timeout(3_000),
    }).then(
      (response) => `answered ${response.status}`,
      (error: Error) => (error.name === 'TimeoutError' ? 'hung' : 'connection closed'),
    );

    // The service sees a failed delivery and resends (a duplicate then), instead of waiting minutes.
    expect(outcome).toBe('connection closed');
    await until(() => recorder.count('successful') === 1, 'the delivery');
    expect(recorder.names()).toEqual(['error', 'notification', 'successful']);
    await ipn.close();
  });
});
