import { createHmac } from 'node:crypto';
import { hmacAuthenticator, ipnRouter, type Logger } from '../../lib/index.js';
import { uniquePayload } from '../helpers/payloads.js';
import { recordEvents } from '../helpers/record-events.js';
import { EXPRESS_VERSIONS, listen, settle, type Running } from '../helpers/servers.js';

const SECRET = 'hmac-secret-shared-with-the-service';
const sign = (text: string, secret = SECRET) => createHmac('sha256', secret).update(text).digest('hex');

describe.each(EXPRESS_VERSIONS)('ipnRouter({ authenticate }) under %s', (_version, express) => {
  const servers: Running[] = [];
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((server) => server.close()));
  });

  async function start(globalParser: boolean, over: 'json' | 'raw' = 'json') {
    const errors: Array<{ fields: unknown; message: string }> = [];
    const logger: Logger = {
      debug: () => {},
      info: () => {},
      warn: () => {},
      error: (fields: unknown, message?: string) => void errors.push({ fields, message: String(message) }),
    };
    const ipn = ipnRouter({
      logger,
      authenticate: hmacAuthenticator({ secret: SECRET, header: 'x-signature', over }),
    });
    const app = express();
    if (globalParser) app.use(express.json());
    app.use('/ipn', ipn);
    const running = await listen(app);
    servers.push(running);
    const post = (text: string, signature: string | undefined) =>
      fetch(`${running.url}/ipn`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          ...(signature === undefined ? {} : { 'x-signature': signature }),
        },
        body: text,
      });
    return { recorder: recordEvents(ipn), post, errors, ipn };
  }

  test.each([false, true])(
    'a notification signed over JSON.stringify(body) is accepted (global express.json(): %p)',
    async (globalParser) => {
      const { recorder, post } = await start(globalParser);
      const body = uniquePayload();
      const text = JSON.stringify(body, null, 2); // pretty on the wire: the JSON form is still the same
      const response = await post(text, sign(JSON.stringify(body)));
      await settle();

      expect(response.status).toBe(200);
      expect(recorder.names()).toEqual(['notification', 'successful']);
    },
  );

  test('over the raw body: the exact bytes are signed', async () => {
    const { recorder, post } = await start(false, 'raw');
    const text = JSON.stringify(uniquePayload(), null, 1);
    const response = await post(text, sign(text));
    await settle();

    expect(response.status).toBe(200);
    expect(recorder.count('successful')).toBe(1);
  });

  test.each([
    ['missing', undefined],
    ['made with another secret', 'other'],
    ['of another body (a forged amount)', 'forged'],
  ])(
    'a signature %s: 401, invalid (unauthorized), one loud log line, nothing emitted',
    async (_case, kind) => {
      const { recorder, post, errors, ipn } = await start(false);
      const body = uniquePayload();
      const text = JSON.stringify(kind === 'forged' ? { ...body, amount: 999_999 } : body);
      const signature =
        kind === undefined
          ? undefined
          : sign(JSON.stringify(body), kind === 'other' ? 'another-secret' : SECRET);
      const first = await post(text, signature);
      const second = await post(text, signature);
      await settle();

      expect(first.status).toBe(401);
      expect(await first.json()).toEqual({
        error: 'unauthorized',
        message: 'the notification failed authentication: its signature is missing or does not match',
      });
      expect(second.status).toBe(401);
      expect(recorder.names()).toEqual(['invalid', 'invalid']);
      expect(recorder.of('invalid')[0]).toMatchObject({ reason: 'unauthorized', status: 401 });
      expect(ipn.metrics().invalid).toBe(2);
      // Rate-limited: the second failure within the minute adds no line.
      expect(errors).toHaveLength(1);
      expect(errors[0]?.message).toMatch(/failed authenticate .* payments are being refused/);
    },
  );

  test('a valid signature still goes through dedupe: the signed resend is a duplicate', async () => {
    const { recorder, post } = await start(false);
    const body = uniquePayload();
    const text = JSON.stringify(body);
    await post(text, sign(text));
    const resend = await post(text, sign(text));
    await settle();

    expect(await resend.json()).toEqual({ ok: true, duplicate: true });
    expect(recorder.names()).toEqual(['notification', 'successful', 'duplicate']);
  });

  test('authenticate sees the address token: a token per transaction, checked against custom_data', async () => {
    const tokenFor = (orderId: string) => sign(`token:${orderId}`);
    const ipn = ipnRouter({
      logger: { debug() {}, info() {}, warn() {}, error() {} },
      authenticate: ({ token, record }) => token === tokenFor(String(record.custom_data)),
    });
    const recorder = recordEvents(ipn);
    const app = express();
    app.use('/ipn', ipn);
    const running = await listen(app);
    servers.push(running);
    const send = (token: string, customData: string) =>
      fetch(`${running.url}/ipn?token=${token}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(uniquePayload({ custom_data: customData })),
      });
    const genuine = await send(tokenFor('order-42'), 'order-42');
    const reused = await send(tokenFor('order-42'), 'order-43'); // another order's token
    await settle();

    expect([genuine.status, reused.status]).toEqual([200, 401]);
    expect(recorder.names()).toEqual(['notification', 'successful', 'invalid']);
  });

  test('an authenticate function that throws answers 500 (the service resends) and emits error', async () => {
    const ipn = ipnRouter({
      logger: { debug() {}, info() {}, warn() {}, error() {} },
      authenticate: () => {
        throw new Error('secret store down');
      },
    });
    const recorder = recordEvents(ipn);
    const app = express();
    app.use('/ipn', ipn);
    const running = await listen(app);
    servers.push(running);
    const response = await fetch(`${running.url}/ipn`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(uniquePayload()),
    });
    await settle();

    expect(response.status).toBe(500);
    expect(recorder.names()).toEqual(['error']);
  });
});

describe('a signature header reaches authenticate through every adapter', () => {
  const signed = () => {
    const payload = uniquePayload();
    const body = JSON.stringify(payload);
    return { payload, body, signature: sign(JSON.stringify(JSON.parse(body))) };
  };
  const router = () => {
    const ipn = ipnRouter({
      logger: { debug() {}, info() {}, warn() {}, error() {} },
      authenticate: hmacAuthenticator({ secret: SECRET, header: 'x-signature' }),
    });
    return { ipn, recorder: recordEvents(ipn) };
  };

  test('ipn.fetch: signed is credited, unsigned is 401', async () => {
    const { ipn, recorder } = router();
    const { payload, body, signature } = signed();
    const request = (headers: Record<string, string>) =>
      new Request('https://shop.example/ipn', {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body,
      });

    const unsigned = await ipn.fetch(request({}));
    const good = await ipn.fetch(request({ 'X-Signature': signature }));
    await settle();

    expect([unsigned.status, good.status]).toEqual([401, 200]);
    expect(recorder.of('successful').map((n) => n.transaction_id)).toEqual([payload.transaction_id]);
    await ipn.close();
  });

  test('ipn-kit/fastify: signed is credited, unsigned is 401', async () => {
    const { default: Fastify } = await import('fastify');
    const { ipnPlugin } = await import('../../lib/fastify.js');
    const { ipn, recorder } = router();
    const app = Fastify();
    await app.register(ipnPlugin, { prefix: '/ipn', router: ipn });
    const { payload, body, signature } = signed();
    const base = await app.listen({ port: 0, host: '127.0.0.1' });
    const inject = (headers: Record<string, string>) =>
      fetch(`${base}/ipn`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body,
      });

    try {
      const unsigned = await inject({});
      const good = await inject({ 'x-signature': signature });
      await settle();

      expect([unsigned.status, good.status]).toEqual([401, 200]);
      expect(recorder.of('successful').map((n) => n.transaction_id)).toEqual([payload.transaction_id]);
    } finally {
      await app.close();
      await ipn.close();
    }
  });
});
