import type { IncomingMessage, ServerResponse } from 'node:http';
import request from 'supertest';
import { ipnRouter } from '../../lib/index.js';
import { uniquePayload } from '../helpers/payloads.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, settle, type Running } from '../helpers/servers.js';
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
      res.writeHead = () => {
        throw new TypeError('a header hook of the host threw');
      };
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

describe('shutdown: close() and the work after the answer', () => {
  let running: Running;
  afterEach(() => running.close());

  // FAILING, not fixed here: close() waits for the claims in flight but not for the work after the answer
  // (runAfterResponse), so `await ipn.close(); process.exit()` cuts short the listeners of notifications
  // already answered 200, which the service never resends: at most once, the credit is lost. The core now
  // tracks that work (serve runs it through runAfterResponse), so close() could await it (after one turn, so
  // that a claim answered just before close() has started its work: this also closes the window in which a
  // `verify` router releases and reports a notification it had answered 200). Not done here because it is a
  // change of contract that needs a bound and a decision: a listener that never settles would keep close()
  // (and failure-injection.test.ts's afterEach) waiting forever; bounding it by leaseMs and reporting the
  // listeners still running as `error` with their notification is the likely shape.
  test('close() resolves only once the listeners of a notification already answered 200 have finished', async () => {
    const ipn = ipnRouter({ logger: quiet });
    const credited: string[] = [];
    let finish: () => void = () => {};
    const started = new Promise<void>((resolve) => {
      ipn.on('successful', async (n) => {
        resolve();
        await new Promise<void>((done) => (finish = done)); // the partner's credit, still running
        credited.push(n.transaction_id);
      });
    });
    running = await listen(ipn);
    const payload = uniquePayload();

    const answer = await request(running.url).post('/').send(payload);
    await started;
    let closed = false;
    const closing = ipn.close().then(() => (closed = true));
    await settle();

    // Answered 200, so the service never resends: a host that exits once close() resolved must not cut
    // the credit short. The node:http handler hands the work to nobody else who could wait for it.
    expect(answer.status).toBe(200);
    expect(closed).toBe(false);
    finish();
    await closing;
    expect(credited).toEqual([payload.transaction_id]);
  });
});
