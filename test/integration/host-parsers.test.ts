import request from 'supertest';
import { ipnRouter, type IpnRouter } from '../../lib/index.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { EXPRESS_VERSIONS, listen, type Running, type TestApp } from '../helpers/servers.js';
import { until } from '../helpers/until.js';

describe.each(EXPRESS_VERSIONS)('a host app that parses bodies itself, under %s', (_version, express) => {
  let ipn: IpnRouter;
  let recorder: ReturnType<typeof recordEvents>;
  let running: Running | undefined;

  beforeEach(() => {
    ipn = ipnRouter({ logger: quiet });
    recorder = recordEvents(ipn);
  });
  afterEach(() => running?.close());

  async function start(setup: (app: TestApp) => void): Promise<string> {
    const app = express();
    setup(app);
    running = await listen(app);
    return running.url;
  }

  /** The common host setup: one global parser, then the router. */
  const behind = (parser: unknown) =>
    start((app) => {
      app.use(parser);
      app.use('/ipn', ipn);
    });

  test('a global express.json() before the router: JSON notifications work the same', async () => {
    const url = await behind(express.json());
    const payload = uniquePayload();

    const first = await request(url).post('/ipn').send(payload);
    const resend = await request(url).post('/ipn').send(payload);

    expect([first.status, resend.status]).toEqual([200, 200]);
    expect(recorder.names()).toEqual(['notification', 'successful', 'duplicate']);
    expect(recorder.of('successful')[0]).toMatchObject({
      transaction_id: payload.transaction_id,
      amount: 5000,
    });
  });

  test('a global express.json() before the router: a form notification is still read, never hangs', async () => {
    const url = await behind(express.json());
    const payload = uniquePayload();
    const form = new URLSearchParams({
      transaction_id: String(payload.transaction_id),
      state: 'FAILED',
      custom_data: 'o-1',
    });

    const response = await request(url).post('/ipn').type('form').send(form.toString());

    expect(response.status).toBe(200);
    expect(recorder.of('failed')).toEqual([
      expect.objectContaining({ transaction_id: payload.transaction_id }),
    ]);
  });

  test('a global express.urlencoded() before the router: form notifications work the same', async () => {
    const url = await behind(express.urlencoded({ extended: false }));
    const payload = uniquePayload();
    const form = new URLSearchParams({
      transaction_id: String(payload.transaction_id),
      state: 'SUCCESSFUL',
      custom_data: 'o-2',
      amount: '300',
    });

    const response = await request(url).post('/ipn').type('form').send(form.toString());

    expect(response.status).toBe(200);
    expect(recorder.of('successful')).toEqual([expect.objectContaining({ amount: 300, custom_data: 'o-2' })]);
  });

  test('a global express.text() before the router: the text is parsed as JSON', async () => {
    const url = await behind(express.text({ type: '*/*' }));

    const response = await request(url).post('/ipn').send(uniquePayload());

    expect(response.status).toBe(200);
    expect(recorder.count('successful')).toBe(1);
  });

  test('a global express.raw() before the router: the Buffer is parsed as JSON', async () => {
    const url = await behind(express.raw({ type: '*/*' }));

    const response = await request(url)
      .post('/ipn')
      .send(uniquePayload({ amount: '75' }));

    expect(response.status).toBe(200);
    expect(recorder.of('successful')).toEqual([expect.objectContaining({ amount: 75 })]);
  });

  test('behind express.json(), a custom_data integer above 2^53 (already rounded) is refused with 400', async () => {
    const url = await behind(express.json());
    const text = JSON.stringify(uniquePayload({ custom_data: 'X' })).replace('"X"', '12345678901234567891');

    const response = await request(url).post('/ipn').set('Content-Type', 'application/json').send(text);

    expect(response.status).toBe(400);
    expect(response.body.issues).toEqual([expect.objectContaining({ path: 'custom_data' })]);
  });

  test('a host parser that drops prototype keys or keeps them: nothing is polluted', async () => {
    const url = await behind(express.json());
    const text = JSON.stringify(uniquePayload()).replace(/}$/, ',"__proto__":{"polluted":"yes"}}');

    const response = await request(url).post('/ipn').set('Content-Type', 'application/json').send(text);

    expect(response.status).toBe(200);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(recorder.of('successful')[0].polluted).toBeUndefined();
  });

  test('a middleware that consumed the body without setting req.body: 500 with a diagnosis and an error event', async () => {
    const url = await start((app) => {
      app.use((req: NodeJS.ReadableStream, _res: unknown, next: () => void) => {
        req.on('end', next);
        req.resume();
      });
      app.use('/ipn', ipn);
    });

    const response = await request(url).post('/ipn').send(uniquePayload());

    expect(response.status).toBe(500);
    expect(response.body).toMatchObject({
      error: 'body_unavailable',
      message: expect.stringContaining('mount the IPN router before'),
    });
    expect(recorder.of('error')).toEqual([
      { error: expect.objectContaining({ code: 'IPN_BODY_UNAVAILABLE' }) },
    ]);
  });

  test('an earlier catch-all route that calls next() does not make the router take the paths below it', async () => {
    const url = await start((app) => {
      app.all(/.*/, (_req: unknown, _res: unknown, next: () => void) => next());
      app.use('/ipn', ipn);
      app.get('/ipn/status', (_req: unknown, res: { send: (body: string) => void }) => res.send('host page'));
    });

    expect((await request(url).get('/ipn/status')).text).toBe('host page');
    expect((await request(url).post('/ipn/other').send(uniquePayload())).status).toBe(404);
    expect((await request(url).post('/ipn').send(uniquePayload())).status).toBe(200);
    expect(recorder.names()).toEqual(['notification', 'successful']);
  });

  test('a body drained by a middleware after a skipping express.json(): 500 body_unavailable, not a field error', async () => {
    const url = await start((app) => {
      app.use(express.json()); // skips a form body; Express 4's leaves req.body = {}
      app.use((req: NodeJS.ReadableStream, _res: unknown, next: () => void) => {
        req.on('end', next);
        req.resume();
      });
      app.use('/ipn', ipn);
    });

    const form = new URLSearchParams({
      transaction_id: 'A.1',
      state: 'FAILED',
      custom_data: '{"orderId":"order-1"}',
    });
    const response = await request(url).post('/ipn').type('form').send(form.toString());

    expect(response.status).toBe(500);
    expect(response.body.error).toBe('body_unavailable');
    expect(recorder.names()).toEqual(['error']);
  });

  test('app.post(path, wrapper) that calls ipn itself is served, not passed on', async () => {
    const url = await start((app) =>
      app.post('/callbacks/ipn', (req: never, res: never, next: never) => ipn(req, res, next)),
    );

    const response = await request(url).post('/callbacks/ipn').send(uniquePayload());

    expect(response.status).toBe(200);
    expect(recorder.count('successful')).toBe(1);
  });

  test.each(['/ipn/', '/IPN', '/Ipn/', '/IPN?source=service'])(
    'app.post("/ipn", wrapper) serves %s, as Express routes it to the wrapper',
    async (path) => {
      const url = await start((app) =>
        app.post('/ipn', (req: never, res: never, next: never) => ipn(req, res, next)),
      );

      const response = await request(url).post(path).send(uniquePayload());

      expect(response.status).toBe(200);
      expect(response.body).toEqual({ ok: true });
      expect(recorder.names()).toEqual(['notification', 'successful']);
    },
  );

  test('a wrapper route inside a router mounted at a prefix serves /api/IPN/', async () => {
    const url = await start((app) => {
      const router = (express as unknown as { Router: () => TestApp }).Router();
      router.post('/ipn', (req: never, res: never, next: never) => ipn(req, res, next));
      app.use('/api', router);
    });

    const response = await request(url).post('/api/IPN/').send(uniquePayload());

    expect(response.status).toBe(200);
    expect(recorder.count('successful')).toBe(1);
  });

  test('behind express.json(), a body of {} answers 400 invalid_fields', async () => {
    const url = await behind(express.json());

    const response = await request(url).post('/ipn').set('Content-Type', 'application/json').send('{}');

    expect(response.status).toBe(400);
    expect(response.body.error).toBe('invalid_fields');
  });

  test('behind express.urlencoded(), a repeated identity field is refused, not picked or joined', async () => {
    const url = await behind(express.urlencoded({ extended: false }));

    const response = await request(url)
      .post('/ipn')
      .type('form')
      .send('transaction_id=A.1&state=SUCCESSFUL&custom_data=order-1&custom_data=order-2');

    expect(response.status).toBe(400);
    expect(response.body.issues).toEqual([
      { path: 'custom_data', message: 'custom_data appears more than once' },
    ]);
    expect(recorder.names()).toEqual(['invalid']);
  });

  test('app.post with a route parameter serves the notification', async () => {
    const url = await start((app) => app.post('/ipn/:tenant', ipn));

    const response = await request(url).post('/ipn/acme').send(uniquePayload());

    expect(response.status).toBe(200);
    expect(recorder.count('successful')).toBe(1);
  });

  test('when the host already answered, the notification is still delivered and no error is made up', async () => {
    const url = await start((app) => {
      app.use(
        (req: object, res: { status: (code: number) => { send: (b: string) => void } }, next: () => void) => {
          res.status(202).send('accepted by the host');
          next();
        },
      );
      app.use('/ipn', ipn);
    });

    const response = await request(url).post('/ipn').send(uniquePayload());
    // The host answered before the router read the body: the delivery may come after the answer.
    await until(() => recorder.count('successful') > 0, 'the delivery');

    expect(response.status).toBe(202);
    expect(recorder.names()).toEqual(['notification', 'successful']);
  });

  test.each([
    ['{ }', 'invalid_fields'],
    ['[ ]', 'not_an_object'],
  ])('behind express.json(), a body of %s answers 400 %s', async (body, error) => {
    const url = await behind(express.json({ strict: false }));

    const response = await request(url).post('/ipn').set('Content-Type', 'application/json').send(body);

    expect(response.status).toBe(400);
    expect(response.body.error).toBe(error);
  });

  test('behind express.urlencoded({ extended: true }), a bracketed identity field is refused', async () => {
    const url = await behind(express.urlencoded({ extended: true }));

    const response = await request(url)
      .post('/ipn')
      .type('form')
      .send('transaction_id=A.1&state=SUCCESSFUL&custom_data[a]=order-1&custom_data[b]=order-2');

    expect(response.status).toBe(400);
    expect(response.body.issues).toEqual([expect.objectContaining({ path: 'custom_data' })]);
  });

  test('app.post(path, ipn) mounts it as a route as well', async () => {
    const url = await start((app) => app.post('/callbacks/ipn', ipn));

    const response = await request(url).post('/callbacks/ipn').send(uniquePayload());

    expect(response.status).toBe(200);
    expect(recorder.count('successful')).toBe(1);
  });
});
