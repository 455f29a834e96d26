import http, { type IncomingMessage } from 'node:http';
import { gzipSync } from 'node:zlib';
import request from 'supertest';
import { ipnRouter, type IpnRouter } from '../../lib/index.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { EXPRESS_VERSIONS, listen, type Running } from '../helpers/servers.js';

/**
 * The raw-body capture many apps install for signature checks: it decodes the stream as UTF-8 text and
 * lets the next handlers run while it collects.
 */
function captureRawBody(req: IncomingMessage & { rawBody?: string }, _res: unknown, next: () => void): void {
  req.setEncoding('utf8');
  let raw = '';
  req.on('data', (chunk: string) => (raw += chunk));
  req.on('end', () => (req.rawBody = raw));
  next();
}

describe.each(EXPRESS_VERSIONS)(
  'a host middleware that calls req.setEncoding("utf8"), under %s',
  (_v, express) => {
    let ipn: IpnRouter;
    let recorder: ReturnType<typeof recordEvents>;
    let running: Running | undefined;
    let captured: string[];

    beforeEach(async () => {
      ipn = ipnRouter({ logger: quiet });
      recorder = recordEvents(ipn);
      captured = [];
      const app = express();
      app.use(captureRawBody);
      app.use(
        (
          req: { rawBody?: string; on: (e: string, f: () => void) => void },
          _res: unknown,
          next: () => void,
        ) => {
          req.on('end', () => captured.push(req.rawBody ?? ''));
          next();
        },
      );
      app.use('/ipn', ipn);
      running = await listen(app);
    });
    afterEach(() => running?.close());

    test('the notification is read from the text chunks, answered 200 and emitted, accents and emoji intact', async () => {
      const payload = uniquePayload({
        customer_name: 'Aïssata Koné 🙂',
        custom_data: '{"orderId":"été-42"}',
      });
      const text = JSON.stringify(payload);

      const response = await request(running!.url)
        .post('/ipn')
        .set('Content-Type', 'application/json')
        .send(text);

      expect(response.status).toBe(200);
      expect(response.body).toEqual({ ok: true });
      expect(recorder.names()).toEqual(['notification', 'successful']);
      const [notification] = recorder.of('successful');
      expect(notification.customer_name).toBe('Aïssata Koné 🙂');
      expect(notification.custom_data).toBe('{"orderId":"été-42"}');
      expect(captured).toEqual([text]); // the host's own capture still works
    });

    test('a body over the limit is still 413, counted in bytes (sent chunked, with no Content-Length)', async () => {
      const big = uniquePayload({ customer_name: 'é'.repeat(60_000) }); // 120 000 bytes, 60 000 characters
      const status = await new Promise<number>((resolve, reject) => {
        const req = http.request(`${running!.url}/ipn`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
        });
        req.on('response', (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        });
        req.on('error', reject);
        req.write(JSON.stringify(big)); // no Content-Length: Node sends it chunked
        req.end();
      });

      expect(status).toBe(413);
      expect(recorder.names()).toEqual(['invalid']);
    });

    test('a gzip body the UTF-8 decoding mangled is answered 400, and the process keeps running', async () => {
      const response = await request(running!.url)
        .post('/ipn')
        .set('Content-Type', 'application/json')
        .set('Content-Encoding', 'gzip')
        .send(gzipSync(JSON.stringify(uniquePayload())));

      expect(response.status).toBe(400);
      expect(response.body.error).toBe('malformed_body');
      const after = await request(running!.url).post('/ipn').send(uniquePayload());
      expect(after.status).toBe(200);
    });
  },
);
