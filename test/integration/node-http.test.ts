import request from 'supertest';
import { ipnRouter } from '../../lib/index.js';
import { uniquePayload } from '../helpers/payloads.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, type Running } from '../helpers/servers.js';

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
