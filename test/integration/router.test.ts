import { connect } from 'node:net';
import { gzipSync } from 'node:zlib';
import request from 'supertest';
import { z } from 'zod';
import { ipnRouter, type IpnRouter } from '../../lib/index.js';
import { failedPayload, successfulPayload, uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { EXPRESS_VERSIONS, listen, settle, type Running } from '../helpers/servers.js';

const customData = z.object({ orderId: z.string() });

describe.each(EXPRESS_VERSIONS)('the IPN router under %s', (_version, express) => {
  let ipn: IpnRouter<{ orderId: string }>;
  let recorder: ReturnType<typeof recordEvents>;
  let running: Running;

  beforeEach(async () => {
    ipn = ipnRouter({ customData, logger: quiet });
    recorder = recordEvents(ipn);
    const app = express();
    app.use('/ipn', ipn);
    app.get('/ipn/status-page', (_req: unknown, res: { send: (body: string) => void }) =>
      res.send('host page'),
    );
    app.get('/health', (_req: unknown, res: { send: (body: string) => void }) => res.send('host health'));
    running = await listen(app);
  });
  afterEach(() => running.close());

  const post = (body: unknown) =>
    request(running.url)
      .post('/ipn')
      .send(body as object);

  test('a first SUCCESSFUL notification answers 200 and emits notification then successful, fully parsed', async () => {
    const response = await post(successfulPayload());

    expect(response.status).toBe(200);
    expect(response.headers['content-type']).toMatch(/^application\/json/);
    expect(response.body).toEqual({ ok: true });
    expect(recorder.names()).toEqual(['notification', 'successful']);
    const notification = recorder.of('successful')[0];
    expect(notification).toMatchObject({
      transaction_id: 'EFB.001158',
      state: 'SUCCESSFUL',
      amount: 5000,
      commission: 75,
      p_id: 7,
      custom_data: '{"orderId":"order-1001"}',
      customData: { orderId: 'order-1001' },
    });
    expect(notification).not.toHaveProperty('comission');
    expect(recorder.of('notification')[0]).toBe(notification);
  });

  test('a first FAILED notification emits notification then failed, lenient on informational fields', async () => {
    const response = await post(failedPayload({ custom_data: '{"orderId":"order-1002"}' }));

    expect(response.status).toBe(200);
    expect(recorder.names()).toEqual(['notification', 'failed']);
    expect(recorder.of('failed')[0]).toMatchObject({
      transaction_id: 'PIX_22827809',
      state: 'FAILED',
      amount: 2500,
      fee: 0,
      service_id: 3,
      hash: '',
      sms_link: null,
      error: 'insufficient balance',
      extra: { currency: 'XOF', transaction_channel: 'wave' },
    });
  });

  test('the 200 is sent before any listener finishes', async () => {
    let finish!: () => void;
    let finished = false;
    ipn.on('successful', async () => {
      await new Promise<void>((resolve) => (finish = resolve));
      finished = true;
    });

    const response = await post(uniquePayload());

    expect(response.status).toBe(200);
    expect(finished).toBe(false);
    finish();
    await settle();
    expect(finished).toBe(true);
  });

  test('the answer is written before any listener runs, even a synchronous one', async () => {
    const writtenWhenListenersRan: boolean[] = [];
    let current: { writableEnded: boolean } | undefined;
    const app = express();
    app.use((_req: unknown, res: { writableEnded: boolean }, next: () => void) => {
      current = res;
      next();
    });
    app.use('/ipn', ipn);
    const own = await listen(app);
    ipn.on('notification', () => void writtenWhenListenersRan.push(current?.writableEnded === true));
    ipn.on('successful', () => void writtenWhenListenersRan.push(current?.writableEnded === true));

    const response = await request(own.url).post('/ipn').send(uniquePayload());
    await own.close();

    expect(response.status).toBe(200);
    expect(writtenWhenListenersRan).toEqual([true, true]);
  });

  test('a resend of a SUCCESSFUL notification emits duplicate only and answers 200', async () => {
    const payload = uniquePayload();
    await post(payload);
    const resend = await post(payload);

    expect(resend.status).toBe(200);
    expect(resend.body).toEqual({ ok: true, duplicate: true });
    expect(recorder.names()).toEqual(['notification', 'successful', 'duplicate']);
    expect(recorder.of('duplicate')[0]).toMatchObject({
      transaction_id: payload.transaction_id,
      state: 'SUCCESSFUL',
    });
  });

  test('50 concurrent copies of one notification emit exactly one successful and 49 duplicates', async () => {
    const payload = uniquePayload();
    const responses = await Promise.all(Array.from({ length: 50 }, () => post(payload)));

    expect(responses.map((r) => r.status)).toEqual(Array(50).fill(200));
    expect(recorder.count('successful')).toBe(1);
    expect(recorder.count('notification')).toBe(1);
    expect(recorder.count('duplicate')).toBe(49);
  });

  test('FAILED then SUCCESSFUL for one transaction emits both, each once', async () => {
    const failed = uniquePayload({ state: 'FAILED' });
    const successful = { ...failed, state: 'SUCCESSFUL' };
    for (const body of [failed, successful, failed, successful]) expect((await post(body)).status).toBe(200);

    expect(recorder.names()).toEqual([
      'notification',
      'failed',
      'notification',
      'successful',
      'duplicate',
      'duplicate',
    ]);
  });

  test('a non-final state is emitted as notification only, never as successful', async () => {
    await post(uniquePayload({ state: 'PENDING1' }));
    await post(uniquePayload({ state: 'successful' }));

    expect(recorder.names()).toEqual(['notification', 'notification']);
    expect(recorder.of('notification').map((n: { state: string }) => n.state)).toEqual([
      'PENDING1',
      'successful',
    ]);
  });

  test.each([
    ['an integer above 2^53', '12345678901234567891'],
    ['a decimal with a trailing zero', '12.30'],
    ['decoded JSON', '{ "orderId": 12345678901234567891 }'],
  ])('a custom_data that came back as %s is kept as its exact source text', async (_case, source) => {
    const text = JSON.stringify(uniquePayload({ custom_data: 'PLACEHOLDER' })).replace(
      '"PLACEHOLDER"',
      source,
    );
    const response = await request(running.url)
      .post('/ipn')
      .set('Content-Type', 'application/json')
      .send(text);

    expect(response.status).toBe(200);
    expect(recorder.of('notification')[0].custom_data).toBe(source);
  });

  test('custom_data that does not match the schema still emits the payment, with customDataError', async () => {
    await post(uniquePayload({ custom_data: 'not-json-and-not-an-object' }));

    const [notification] = recorder.of('successful');
    expect(notification.customData).toBeUndefined();
    expect(notification.customDataError).toMatchObject({ code: 'IPN_CUSTOM_DATA_INVALID' });
    expect(notification.custom_data).toBe('not-json-and-not-an-object');
  });

  test.each([
    ['application/json; charset=utf-8'],
    ['application/json; charset=UTF-8'],
    ['text/json'],
    ['application/vnd.provider.ipn+json'],
  ])('a JSON body sent as %s is parsed', async (contentType) => {
    const payload = uniquePayload();
    const response = await request(running.url)
      .post('/ipn')
      .set('Content-Type', contentType)
      .send(JSON.stringify(payload));

    expect(response.status).toBe(200);
    expect(recorder.of('successful')[0]).toMatchObject({ transaction_id: payload.transaction_id });
  });

  test('a JSON body in another charset is decoded by its charset', async () => {
    const payload = uniquePayload({ customer_name: 'Adjoua Koné' });
    const response = await postBytes(`${running.url}/ipn`, Buffer.from(JSON.stringify(payload), 'latin1'), {
      'Content-Type': 'application/json; charset=iso-8859-1',
    });

    expect(response.status).toBe(200);
    expect(recorder.of('successful')[0].customer_name).toBe('Adjoua Koné');
  });

  test('a body with no content type is read as JSON', async () => {
    const payload = uniquePayload();
    const response = await postBytes(`${running.url}/ipn`, Buffer.from(JSON.stringify(payload)), {});

    expect(response.status).toBe(200);
    expect(recorder.count('successful')).toBe(1);
  });

  test('a url-encoded form is parsed, numbers as numbers', async () => {
    const payload = uniquePayload();
    const form = new URLSearchParams(
      Object.entries(payload).map(([key, value]): [string, string] => [
        key,
        typeof value === 'object' ? '' : String(value as string | number),
      ]),
    );
    const response = await request(running.url).post('/ipn').type('form').send(form.toString());

    expect(response.status).toBe(200);
    expect(recorder.of('successful')[0]).toMatchObject({
      transaction_id: payload.transaction_id,
      amount: 5000,
      commission: 75,
      customData: { orderId: 'order-1001' },
    });
  });

  test('a gzip-compressed body is decompressed', async () => {
    const payload = uniquePayload();
    const response = await postBytes(`${running.url}/ipn`, gzipSync(JSON.stringify(payload)), {
      'Content-Type': 'application/json',
      'Content-Encoding': 'gzip',
    });

    expect(response.status).toBe(200);
    expect(recorder.count('successful')).toBe(1);
  });

  test('malformed JSON answers 400 with a JSON error and emits invalid', async () => {
    const response = await request(running.url)
      .post('/ipn')
      .set('Content-Type', 'application/json')
      .send('{"transaction_id": ');

    expect(response.status).toBe(400);
    expect(response.body).toMatchObject({
      error: 'malformed_body',
      message: expect.stringContaining('not valid JSON'),
    });
    expect(recorder.names()).toEqual(['invalid']);
    expect(recorder.of('invalid')[0]).toMatchObject({
      reason: 'malformed_body',
      status: 400,
      received: '{"transaction_id": ',
    });
  });

  test.each([['[1,2]'], ['"SUCCESSFUL"'], ['null'], ['42']])(
    'a JSON body that is not an object (%s) answers 400',
    async (text) => {
      const response = await request(running.url)
        .post('/ipn')
        .set('Content-Type', 'application/json')
        .send(text);

      expect(response.status).toBe(400);
      expect(response.body.error).toBe('not_an_object');
      expect(recorder.of('invalid')).toEqual([
        expect.objectContaining({ reason: 'not_an_object', status: 400 }),
      ]);
    },
  );

  test('an empty body answers 400', async () => {
    const response = await request(running.url).post('/ipn').set('Content-Type', 'application/json').send('');

    expect(response.status).toBe(400);
    expect(response.body).toMatchObject({
      error: 'malformed_body',
      message: expect.stringContaining('empty'),
    });
    expect(recorder.count('invalid')).toBe(1);
  });

  test.each([
    ['transaction_id is missing', { transaction_id: undefined }, 'transaction_id'],
    ['transaction_id is a number', { transaction_id: 1158 }, 'transaction_id'],
    ['transaction_id has spaces', { transaction_id: 'EFB 001158' }, 'transaction_id'],
    ['state is missing', { state: undefined }, 'state'],
    ['state is empty', { state: '' }, 'state'],
  ])('when %s it answers 400 with the field errors', async (_case, overrides, field) => {
    const response = await post(successfulPayload(overrides));

    expect(response.status).toBe(400);
    expect(response.body).toMatchObject({
      error: 'invalid_fields',
      issues: [expect.objectContaining({ path: field })],
    });
    expect(recorder.names()).toEqual(['invalid']);
    expect(recorder.of('invalid')[0]).toMatchObject({ reason: 'invalid_fields', issues: [{ path: field }] });
  });

  test('a body over the limit answers 413 (declared length)', async () => {
    const response = await post(uniquePayload({ padding: 'x'.repeat(110 * 1024) }));

    expect(response.status).toBe(413);
    expect(response.body.error).toBe('body_too_large');
    expect(recorder.of('invalid')).toEqual([
      expect.objectContaining({ reason: 'body_too_large', status: 413 }),
    ]);
  });

  test('a chunked body over the limit answers 413, and the server keeps serving', async () => {
    const response = await fetch(`${running.url}/ipn`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: chunked([
        JSON.stringify(uniquePayload()).slice(0, -1),
        `,"padding":"${'x'.repeat(200 * 1024)}"}`,
      ]),
      duplex: 'half',
    });

    expect(response.status).toBe(413);
    expect(recorder.count('invalid')).toBe(1);
    expect((await post(uniquePayload())).status).toBe(200);
  });

  test('a client that goes away mid-body emits invalid (request_aborted), and the server keeps serving', async () => {
    const { port } = new URL(running.url);
    const socket = connect(Number(port), '127.0.0.1');
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.write(
      'POST /ipn HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"tra',
    );
    await new Promise((resolve) => setTimeout(resolve, 50));
    socket.destroy();
    while (recorder.count('invalid') === 0) await new Promise((resolve) => setTimeout(resolve, 10));

    expect(recorder.names()).toEqual(['invalid']);
    expect(recorder.of('invalid')[0]).toMatchObject({ reason: 'request_aborted' });
    expect((await post(uniquePayload())).status).toBe(200);
  });

  test.each([
    ['multipart/form-data; boundary=x', '--x--'],
    ['text/plain', '--x--'],
    ['application/xml', '<ipn/>'],
    ['application/json; charset=foo-bar', '{}'],
  ])('a body that cannot carry the record (%s, %s) answers 415', async (contentType, body) => {
    const response = await request(running.url).post('/ipn').set('Content-Type', contentType).send(body);

    expect(response.status).toBe(415);
    expect(response.body.error).toBe('unsupported_media_type');
    expect(recorder.of('invalid')).toEqual([
      expect.objectContaining({ reason: 'unsupported_media_type', status: 415 }),
    ]);
  });

  test.each([
    ['text/plain'],
    ['text/plain; charset=utf-8'],
    ['application/octet-stream'],
    ['application/x-www-form-urlencoded'],
    ['text/html'],
  ])('a JSON object labelled %s is read as JSON: 200, then its resend is a duplicate', async (type) => {
    const payload = uniquePayload();
    const send = () =>
      request(running.url).post('/ipn').set('Content-Type', type).send(JSON.stringify(payload));

    const first = await send();
    const resend = await send();

    expect([first.status, resend.status]).toEqual([200, 200]);
    expect(resend.body).toEqual({ ok: true, duplicate: true });
    expect(recorder.names()).toEqual(['notification', 'successful', 'duplicate']);
    expect(recorder.of('successful')[0]).toMatchObject({ transaction_id: payload.transaction_id });
  });

  test('a broken JSON object labelled text/plain answers 400 malformed_body, as under application/json', async () => {
    const response = await request(running.url).post('/ipn').set('Content-Type', 'text/plain').send('{"a":');

    expect(response.status).toBe(400);
    expect(response.body.error).toBe('malformed_body');
    expect(recorder.of('invalid')).toEqual([expect.objectContaining({ reason: 'malformed_body' })]);
  });

  test('an unsupported content encoding answers 415', async () => {
    const response = await request(running.url)
      .post('/ipn')
      .set('Content-Type', 'application/json')
      .set('Content-Encoding', 'compress')
      .send('{}');

    expect(response.status).toBe(415);
    expect(recorder.count('invalid')).toBe(1);
  });

  test('a query string on the mount path is still the mount path', async () => {
    const response = await request(running.url).post('/ipn?source=service&token=abc').send(uniquePayload());

    expect(response.status).toBe(200);
    expect(recorder.count('successful')).toBe(1);
  });

  test('a body of exactly the limit is accepted; one byte more is 413', async () => {
    const text = JSON.stringify(uniquePayload());
    const limited = ipnRouter({ limit: Buffer.byteLength(text), logger: quiet });
    const app = express();
    app.use('/ipn', limited);
    const own = await listen(app);
    const send = (body: string) =>
      request(own.url).post('/ipn').set('Content-Type', 'application/json').send(body);

    const exact = await send(text);
    const over = await send(`${text} `);
    await own.close();

    expect([exact.status, over.status]).toEqual([200, 413]);
  });

  test('a declared Content-Length over the limit is answered 413 before any of the body is sent', async () => {
    const { port } = new URL(running.url);
    const socket = connect(Number(port), '127.0.0.1');
    const answer = new Promise<string>((resolve) =>
      socket.once('data', (chunk) => resolve(chunk.toString())),
    );
    socket.write(
      'POST /ipn HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 500000\r\n\r\n',
    );

    const head = await answer;
    socket.destroy();

    expect(head).toMatch(/^HTTP\/1\.1 413 /);
    expect(recorder.of('invalid')).toEqual([expect.objectContaining({ reason: 'body_too_large' })]);
  });

  test('GET and HEAD on the route answer 200 and emit nothing', async () => {
    const get = await request(running.url).get('/ipn');
    const head = await request(running.url).head('/ipn');

    expect(get.status).toBe(200);
    expect(get.body).toEqual({ ok: true });
    expect(head.status).toBe(200);
    expect(recorder.events).toEqual([]);
  });

  test.each([['put'], ['delete'], ['patch'], ['options']] as const)(
    '%s answers 405 with Allow',
    async (method) => {
      const response = await request(running.url)[method]('/ipn');

      expect(response.status).toBe(405);
      expect(response.headers.allow).toBe('GET, HEAD, POST');
      expect(recorder.events).toEqual([]);
    },
  );

  test('other routes of the host app fall through, also below the mount path', async () => {
    expect((await request(running.url).get('/health')).text).toBe('host health');
    expect((await request(running.url).get('/ipn/status-page')).text).toBe('host page');
    expect((await request(running.url).post('/ipn/unknown').send(uniquePayload())).status).toBe(404);
    expect(recorder.events).toEqual([]);
  });

  test('a payload with __proto__ and constructor keys pollutes no prototype', async () => {
    const text = JSON.stringify(uniquePayload()).replace(
      /}$/,
      ',"__proto__":{"polluted":"yes"},"constructor":{"prototype":{"polluted":"yes"}},"nested":{"__proto__":{"polluted":"yes"}}}',
    );
    const response = await request(running.url)
      .post('/ipn')
      .set('Content-Type', 'application/json')
      .send(text);

    expect(response.status).toBe(200);
    const [notification] = recorder.of('successful');
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(notification.polluted).toBeUndefined();
    expect(notification.extra.polluted).toBeUndefined();
    expect(notification.extra.nested.polluted).toBeUndefined();
    expect(Object.getPrototypeOf(notification)).toBe(Object.prototype);
  });

  const PROTOTYPE_NAMES = Object.getOwnPropertyNames(Object.prototype);

  test.each([
    ['JSON', 'application/json'],
    ['a form', 'application/x-www-form-urlencoded'],
  ])(
    'unknown fields named after Object.prototype members, in %s, are dropped: String(n) works',
    async (_format, type) => {
      const payload: Record<string, unknown> = { ...uniquePayload(), currency: 'XOF' };
      for (const name of PROTOTYPE_NAMES) if (name !== '__proto__') payload[name] = 'x';
      const text =
        type === 'application/json'
          ? JSON.stringify(payload)
          : new URLSearchParams(payload as Record<string, string>).toString();
      const texts: string[] = [];
      // What partner code does with a notification: both threw when the payload supplied these names.
      ipn.on('successful', (n) =>
        // eslint-disable-next-line @typescript-eslint/no-base-to-string, no-prototype-builtins
        texts.push(String(n), `${n.hasOwnProperty('amount')}`),
      );

      const response = await request(running.url).post('/ipn').set('Content-Type', type).send(text);

      expect(response.status).toBe(200);
      const [notification] = recorder.of('successful');
      for (const name of PROTOTYPE_NAMES) expect(Object.hasOwn(notification, name)).toBe(false);
      for (const name of PROTOTYPE_NAMES) expect(Object.hasOwn(notification.extra, name)).toBe(false);
      expect(notification.extra.currency).toBe('XOF'); // other unknown fields are kept, under extra
      expect(texts).toEqual(['[object Object]', 'true']);
      expect(recorder.names()).toEqual(['notification', 'successful']);
    },
  );
});

/** Posts raw bytes as they are (supertest would serialise a Buffer as JSON). */
async function postBytes(url: string, body: Buffer, headers: Record<string, string>) {
  const response = await fetch(url, { method: 'POST', headers, body });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

function chunked(parts: string[]): ReadableStream<Uint8Array> {
  return new ReadableStream({
    start(controller) {
      for (const part of parts) controller.enqueue(Buffer.from(part));
      controller.close();
    },
  });
}
