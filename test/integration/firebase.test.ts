import { createHmac } from 'node:crypto';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';
import { onRequest, type HttpsFunction } from 'firebase-functions/v2/https';
import { hmacAuthenticator, ipnRouter } from '../../lib/index.js';
import { ipn, router } from '../../examples/frameworks/firebase.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { EXPRESS_VERSIONS, listen, settle, type Running } from '../helpers/servers.js';

/**
 * The documented Firebase function (examples/frameworks/firebase.ts), the `onRequest` handler of the real
 * `firebase-functions` package, served as Firebase serves it: no emulator, but the app Google's Functions
 * Framework builds in front of every HTTP function, an Express app whose body parsers run before the
 * function (JSON, text, form, and raw bytes for any other type), each keeping the bytes it read on
 * `req.rawBody` as a Buffer. The Functions Framework has used Express 4 and Express 5: both are run.
 */
type Express = (typeof EXPRESS_VERSIONS)[number][1];

function firebaseApp(express: Express, fn: HttpsFunction) {
  const rawBodySaver = (req: IncomingMessage & { rawBody?: Buffer }, _res: unknown, buf: Buffer) => {
    req.rawBody = buf;
  };
  const options = { limit: '32mb', verify: rawBodySaver };
  const app = express();
  app.use(express.json(options));
  app.use(express.text(options));
  app.use(express.urlencoded({ ...options, extended: true }));
  app.use(express.raw({ ...options, type: '*/*' }));
  // What the Functions Framework then calls: the function, with Express's own request and response.
  app.use((req: Parameters<HttpsFunction>[0], res: Parameters<HttpsFunction>[1]) => void fn(req, res));
  return app;
}

const JSON_TYPE = { 'content-type': 'application/json' };

async function post(url: string, body: string | Uint8Array, headers: Record<string, string> = {}) {
  const response = await fetch(url, { method: 'POST', headers: { ...JSON_TYPE, ...headers }, body });
  const text = await response.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = text;
  }
  return { status: response.status, body: json };
}

describe.each(EXPRESS_VERSIONS)(
  'the Firebase function onRequest(router), parsed as Firebase does, under %s',
  (_v, express) => {
    let running: Running | undefined;
    let recorder: ReturnType<typeof recordEvents>;
    const recorders: Array<ReturnType<typeof recordEvents>> = [];

    beforeAll(async () => {
      running = await listen(firebaseApp(express, ipn));
    });
    beforeEach(() => {
      recorder = recordEvents(router);
      recorders.push(recorder);
    });
    afterAll(() => running?.close());

    const notification = JSON.stringify(uniquePayload(), null, 2);

    test('the first notification is answered 200 { ok: true } and emitted', async () => {
      expect(await post(running!.url, notification)).toEqual({ status: 200, body: { ok: true } });
      await settle();
      const { transaction_id } = JSON.parse(notification) as { transaction_id: string };
      expect(recorder.names()).toEqual(['notification', 'successful']);
      expect(recorder.of('successful')[0]).toMatchObject({ transaction_id });
    });

    test('the same notification again is answered 200 as a duplicate', async () => {
      expect(await post(running!.url, notification)).toEqual({
        status: 200,
        body: { ok: true, duplicate: true },
      });
      await settle();
      expect(recorder.names()).toEqual(['duplicate']);
    });

    test("a malformed JSON body is answered 400 by Firebase's parser: the function never runs", async () => {
      const answer = await post(running!.url, '{"transaction_id": ');
      await settle();
      expect(answer.status).toBe(400);
      expect(recorder.names()).toEqual([]);
    });

    test('well-formed JSON that is no notification is answered 400 by the router, and emitted as invalid', async () => {
      const answer = await post(running!.url, JSON.stringify({ transaction_id: 'X' }));
      await settle();
      expect(answer).toEqual({
        status: 400,
        body: expect.objectContaining({ error: expect.any(String) }),
      });
      expect(recorder.names()).toEqual(['invalid']);
    });

    test('a gzip body, inflated by Firebase, is read', async () => {
      const fresh = JSON.stringify(uniquePayload());
      const zipped = gzipSync(fresh);
      expect(await post(running!.url, zipped, { 'content-encoding': 'gzip' })).toEqual({
        status: 200,
        body: { ok: true },
      });
      expect(await post(running!.url, fresh)).toEqual({ status: 200, body: { ok: true, duplicate: true } });
    });

    test('hmacAuthenticator over the raw body sees the exact bytes Firebase kept on req.rawBody', async () => {
      const secret = 'firebase-hmac-secret';
      const signed = ipnRouter({
        logger: quiet,
        authenticate: hmacAuthenticator({ secret, header: 'x-signature', over: 'raw' }),
      });
      const events = recordEvents(signed);
      const server = await listen(firebaseApp(express, onRequest(signed)));
      try {
        // Key order and spacing JSON.stringify(req.body) would not give back: only the bytes verify.
        const text = ` {"amount" : 5000,\n ${JSON.stringify(uniquePayload()).slice(1)}`;
        const sign = (body: string) => createHmac('sha256', secret).update(body).digest('hex');
        expect((await post(server.url, text, { 'x-signature': sign(text) })).status).toBe(200);
        expect(
          (await post(server.url, text, { 'x-signature': sign(JSON.stringify(JSON.parse(text))) })).status,
        ).toBe(401);
        await settle();
        expect(events.names()).toEqual(['notification', 'successful', 'invalid']);
      } finally {
        await server.close();
      }
    });
  },
);

describe('node:http with a rawBody left by the host', () => {
  /** A server whose "host parser" consumed the stream and left `body` and `rawBody` as given. */
  async function serve(onRequest: (req: IncomingMessage & Record<string, unknown>, text: string) => void) {
    const ipn = ipnRouter({ logger: quiet });
    const events = recordEvents(ipn);
    const server = createServer((req, res) => {
      let text = '';
      req.setEncoding('utf8');
      req.on('data', (chunk: string) => (text += chunk));
      req.on('end', () => {
        onRequest(req as IncomingMessage & Record<string, unknown>, text);
        ipn(req, res);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    return { url, events, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
  }

  test('a Buffer rawBody is read rather than req.body (the bytes are what was received)', async () => {
    const payload = uniquePayload();
    const served = await serve((req, text) => {
      req.rawBody = Buffer.from(text);
      req.body = { ...payload, amount: 1 }; // a host parser's value that differs: not the one used
    });
    try {
      expect((await post(served.url, JSON.stringify(payload))).status).toBe(200);
      await settle();
      expect(served.events.of('successful')[0]).toMatchObject({ amount: payload.amount });
    } finally {
      await served.close();
    }
  });

  test('a rawBody that is not a Buffer is ignored: req.body is read, as before', async () => {
    const payload = uniquePayload();
    const served = await serve((req, text) => {
      req.rawBody = text;
      req.body = payload;
    });
    try {
      expect((await post(served.url, JSON.stringify(payload))).status).toBe(200);
      await settle();
      expect(served.events.count('successful')).toBe(1);
    } finally {
      await served.close();
    }
  });
});
