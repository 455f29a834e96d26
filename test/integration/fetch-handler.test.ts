import { gzipSync } from 'node:zlib';
import {
  ipnNotificationSchema,
  ipnRouter,
  StoreError,
  TransactionNotFoundError,
  type IpnRouter,
  type Options,
  type StatusSource,
} from '../../lib/index.js';
import { successfulPayload, uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { settle } from '../helpers/servers.js';
import { until } from '../helpers/until.js';

const URL_BASE = 'https://shop.example/api/ipn';

/** A POST of `body` (JSON text of an object, or as given) to the route, as a platform hands it over. */
function post(body: unknown, headers: Record<string, string> = {}, url = URL_BASE): Request {
  const text = typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body);
  return new Request(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: text,
  });
}

/** The status, headers and parsed JSON body of a Response (undefined for an empty body). */
async function read(response: Response) {
  const text = await response.text();
  return {
    status: response.status,
    type: response.headers.get('content-type'),
    headers: response.headers,
    body: text === '' ? undefined : (JSON.parse(text) as Record<string, unknown>),
  };
}

describe('ipn.fetch: a WHATWG Request in, a Response out', () => {
  let ipn: IpnRouter;
  let recorder: ReturnType<typeof recordEvents>;
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown) => unhandled.push(reason);
  beforeAll(() => process.on('unhandledRejection', onUnhandled));
  afterAll(() => process.off('unhandledRejection', onUnhandled));

  const start = (options: Partial<Options<undefined>> = {}) => {
    ipn = ipnRouter({ logger: quiet, ...options });
    recorder = recordEvents(ipn);
  };
  beforeEach(() => start());
  afterEach(async () => {
    await ipn.close();
    await settle();
    expect(unhandled).toEqual([]);
  });

  test('a first notification answers 200 {"ok":true} in JSON and emits notification then successful', async () => {
    const payload = uniquePayload();

    const answer = await read(await ipn.fetch(post(payload)));

    expect(answer).toMatchObject({
      status: 200,
      type: 'application/json; charset=utf-8',
      body: { ok: true },
    });
    expect(recorder.names()).toEqual(['notification', 'successful']);
    expect(recorder.of('successful')[0]).toMatchObject({
      transaction_id: payload.transaction_id,
      amount: 5000,
    });
  });

  test('a resend answers 200 duplicate and emits duplicate only; the other state is emitted once', async () => {
    const payload = uniquePayload();
    await ipn.fetch(post(payload));

    const resend = await read(await ipn.fetch(post(payload)));
    const failed = await read(await ipn.fetch(post({ ...payload, state: 'FAILED' })));

    expect(resend).toMatchObject({ status: 200, body: { ok: true, duplicate: true } });
    expect(failed).toMatchObject({ status: 200, body: { ok: true } });
    // The FAILED after the accepted SUCCESSFUL of the same transaction is a conflict, never `failed`.
    expect(recorder.names()).toEqual(['notification', 'successful', 'duplicate', 'conflict']);
  });

  test.each([
    ['no Content-Type', undefined],
    ['text/plain', 'text/plain'],
    ['application/octet-stream', 'application/octet-stream'],
    ['a form label', 'application/x-www-form-urlencoded'],
  ])('a JSON object with %s is read as JSON', async (_label, type) => {
    const payload = uniquePayload();
    const request = new Request(URL_BASE, {
      method: 'POST',
      headers: type === undefined ? {} : { 'content-type': type },
      body: new TextEncoder().encode(JSON.stringify(payload)),
    });

    expect((await ipn.fetch(request)).status).toBe(200);
    expect(recorder.of('successful')).toEqual([
      expect.objectContaining({ transaction_id: payload.transaction_id }),
    ]);
  });

  test('a url-encoded form and a gzip-compressed body are read', async () => {
    const form = new URLSearchParams({ transaction_id: 'FRM.1', state: 'FAILED', custom_data: 'o-1' });
    const zipped = gzipSync(JSON.stringify(uniquePayload({ transaction_id: 'GZ.1' })));

    const formAnswer = await ipn.fetch(
      post(form.toString(), { 'content-type': 'application/x-www-form-urlencoded' }),
    );
    const gzipAnswer = await ipn.fetch(post(new Uint8Array(zipped), { 'content-encoding': 'gzip' }));

    expect([formAnswer.status, gzipAnswer.status]).toEqual([200, 200]);
    expect(recorder.of('notification').map((n) => n.transaction_id)).toEqual(['FRM.1', 'GZ.1']);
  });

  test.each([
    ['malformed JSON', '{"transaction_id":', {}, 'malformed_body'],
    ['an empty body', '', {}, 'malformed_body'],
    ['a body that does not decompress', 'not gzip', { 'content-encoding': 'gzip' }, 'malformed_body'],
    ['JSON that is not an object', '[1,2]', {}, 'not_an_object'],
    ['a notification without a state', JSON.stringify({ transaction_id: 'A.1' }), {}, 'invalid_fields'],
    [
      'a repeated identity key',
      '{"transaction_id":"A.1","state":"FAILED","state":"SUCCESSFUL"}',
      {},
      'invalid_fields',
    ],
  ])('%s answers 400 with its reason and emits invalid', async (_label, body, headers, reason) => {
    const answer = await read(await ipn.fetch(post(body, headers)));

    expect(answer.status).toBe(400);
    expect(answer.body).toMatchObject({ error: reason, message: expect.any(String) });
    expect(recorder.names()).toEqual(['invalid']);
    expect(recorder.of('invalid')[0]).toMatchObject({ reason, status: 400 });
  });

  test('a body over the limit answers 413, declared or streamed without a length', async () => {
    start({ limit: 100 });
    const big = JSON.stringify(uniquePayload({ padding: 'x'.repeat(200) }));
    const chunks = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode(big));
        controller.close();
      },
    });
    const streamed = new Request(URL_BASE, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: chunks,
      duplex: 'half',
    });

    const declared = await read(await ipn.fetch(post(big)));
    const unknownLength = await read(await ipn.fetch(streamed));

    expect([declared.status, unknownLength.status]).toEqual([413, 413]);
    expect(declared.body).toMatchObject({ error: 'body_too_large' });
    expect(recorder.of('invalid').map((event) => event.status)).toEqual([413, 413]);
  });

  test.each([
    ['multipart', { 'content-type': 'multipart/form-data; boundary=x' }, '--x--'],
    ['a body that is not a JSON object under text/plain', { 'content-type': 'text/plain' }, 'hello'],
    ['an unknown charset', { 'content-type': 'application/json; charset=foo-bar' }, '{}'],
    ['an unknown content encoding', { 'content-encoding': 'compress' }, '{}'],
  ])('%s answers 415 and emits invalid', async (_label, headers, body) => {
    const answer = await read(await ipn.fetch(post(body, headers)));

    expect(answer).toMatchObject({ status: 415, body: { error: 'unsupported_media_type' } });
    expect(recorder.of('invalid')).toEqual([
      expect.objectContaining({ reason: 'unsupported_media_type', status: 415 }),
    ]);
  });

  test('with secret: a missing or wrong token answers 401, the right one 200', async () => {
    start({ secret: 's3cret-token-value' });
    const payload = uniquePayload();

    const missing = await read(await ipn.fetch(post(payload)));
    const wrong = await read(await ipn.fetch(post(payload, {}, `${URL_BASE}?token=nope`)));
    const right = await read(await ipn.fetch(post(payload, {}, `${URL_BASE}?token=s3cret-token-value`)));

    expect([missing.status, wrong.status, right.status]).toEqual([401, 401, 200]);
    expect(missing.body).toMatchObject({ error: 'unauthorized' });
    expect(recorder.names()).toEqual(['invalid', 'invalid', 'notification', 'successful']);
  });

  test('GET and HEAD answer 200 (HEAD without a body); other methods 405 with Allow; no events', async () => {
    const get = await read(await ipn.fetch(new Request(URL_BASE)));
    const head = await read(await ipn.fetch(new Request(URL_BASE, { method: 'HEAD' })));
    const put = await read(await ipn.fetch(new Request(URL_BASE, { method: 'PUT', body: '{}' })));

    expect(get).toMatchObject({ status: 200, body: { ok: true } });
    expect(head).toMatchObject({ status: 200, body: undefined });
    expect(put).toMatchObject({ status: 405, body: { error: 'method_not_allowed' } });
    expect(put.headers.get('allow')).toBe('GET, HEAD, POST');
    expect(recorder.names()).toEqual([]);
  });

  test('GET answers 200 without the secret token, and after close(), while a POST gets 401 then 503', async () => {
    await ipn.close();
    start({ secret: 'liveness-secret-0123456789' });
    const get = await read(await ipn.fetch(new Request(URL_BASE)));
    const unauthorized = await read(await ipn.fetch(post(uniquePayload())));
    await ipn.close();
    const getAfterClose = await read(await ipn.fetch(new Request(URL_BASE)));
    const postAfterClose = await read(await ipn.fetch(post(uniquePayload())));

    expect(get).toMatchObject({ status: 200, body: { ok: true } });
    expect(unauthorized.status).toBe(401);
    expect(getAfterClose).toMatchObject({ status: 200, body: { ok: true } });
    expect(postAfterClose).toMatchObject({ status: 503, body: { error: 'closed' } });
  });

  test('a body the host already read answers 500 body_unavailable and emits error', async () => {
    const request = post(uniquePayload());
    await request.text(); // e.g. `await req.json()` in the route before handing it over

    const answer = await read(await ipn.fetch(request));

    expect(answer).toMatchObject({ status: 500, body: { error: 'body_unavailable' } });
    expect(recorder.names()).toEqual(['error']);
  });

  test("a body the host locked with a reader it never read is 500 body_unavailable, the host's bug, not ours", async () => {
    const request = post(uniquePayload());
    request.body?.getReader(); // e.g. a middleware that took a reader and handed the request over unread
    expect(request.bodyUsed).toBe(false);

    const answer = await read(await ipn.fetch(request));

    expect(answer).toMatchObject({ status: 500, body: { error: 'body_unavailable' } });
    expect(recorder.names()).toEqual(['error']);
    expect(recorder.of('error')[0].error).toMatchObject({ code: 'IPN_BODY_UNAVAILABLE' });
  });

  test.each([
    ['a wrong token, 401, unread', { secret: 'a-secret-of-at-least-16-chars' }, '?token=wrong', 'POST', 401],
    ['another method, 405, unread', {}, '', 'PUT', 405],
    ['a declared length over the limit, 413, unread', { limit: 10 }, '', 'POST', 413],
    ['a streamed body over the limit, 413, read in part', { limit: 10 }, '', 'POST', 413],
  ] as const)(
    'a body the router stops reading (%s) that errors later, the client gone, does not crash the host',
    async (name, options, query, method, status) => {
      start(options);
      let controller!: ReadableStreamDefaultController<Uint8Array>;
      const body = new ReadableStream<Uint8Array>({ start: (c) => void (controller = c) });
      controller.enqueue(new TextEncoder().encode('{"transaction_id":"a body longer than the limit'));
      const declared: Record<string, string> =
        status === 413 && name.includes('declared') ? { 'content-length': '100' } : {};
      const request = new Request(`${URL_BASE}${query}`, {
        method,
        body,
        headers: { 'content-type': 'application/json', ...declared },
        duplex: 'half',
      });

      const answer = await ipn.fetch(request);
      controller.error(new Error('the client went away'));
      await settle();

      // Before: the stream ipn-kit made of the body emitted 'error' with no listener: an uncaught exception.
      expect(answer.status).toBe(status);
    },
  );

  test('a store that fails answers 503 with Retry-After: 30 and emits error', async () => {
    start({
      store: {
        claim: () => Promise.reject(new Error('connection refused')),
        release: () => {},
      },
    });

    const answer = await read(await ipn.fetch(post(uniquePayload())));

    expect(answer).toMatchObject({ status: 503, body: { error: 'store_unavailable' } });
    expect(answer.headers.get('retry-after')).toBe('30');
    expect(recorder.names()).toEqual(['error']);
    expect(recorder.of('error')[0].error).toBeInstanceOf(StoreError);
  });

  test('a request that cannot even be read is a 500 internal_error and an error event, never a rejection', async () => {
    const broken = {
      method: 'POST',
      url: URL_BASE,
      get headers(): Headers {
        throw new Error('a platform bug');
      },
    } as unknown as Request;

    const answer = await read(await ipn.fetch(broken));

    expect(answer).toMatchObject({ status: 500, body: { error: 'internal_error' } });
    expect(recorder.names()).toEqual(['error']);
  });

  test('a listener that throws gets its error event; the answer is still 200', async () => {
    ipn.on('successful', () => {
      throw new Error('ledger down');
    });

    const answer = await ipn.fetch(post(uniquePayload()));

    expect(answer.status).toBe(200);
    expect(recorder.names()).toEqual(['notification', 'successful', 'error']);
  });
});

describe('ipn.fetch with waitUntil: the work after the 200 is handed to the platform', () => {
  /** A status source answering the records of a table; unknown ids are not found (a forgery). */
  const sourceOf = (records: Record<string, Record<string, unknown>>): StatusSource => ({
    getStatus: async (id) => {
      await new Promise((resolve) => setImmediate(resolve));
      const record = records[id];
      if (record === undefined) throw new TransactionNotFoundError(id);
      return ipnNotificationSchema.parse(record);
    },
  });

  test('the promise given to waitUntil settles only after an async listener has finished', async () => {
    const ipn = ipnRouter({ logger: quiet });
    const credited: string[] = [];
    let finish: () => void = () => {};
    ipn.on('successful', async (n) => {
      await new Promise<void>((resolve) => (finish = resolve));
      credited.push(n.transaction_id);
    });
    const handed: Array<Promise<unknown>> = [];
    const payload = uniquePayload();

    const response = await ipn.fetch(post(payload), { waitUntil: (p) => void handed.push(p) });
    let settled = false;
    void handed[0]?.then(() => (settled = true));
    await settle();

    expect(response.status).toBe(200);
    expect(handed).toHaveLength(1);
    expect(settled).toBe(false);
    finish();
    await handed[0];
    expect(credited).toEqual([payload.transaction_id]);
    await ipn.close();
  });

  test('under verify, waitUntil covers the status query: successful for a real one, rejected for a forgery', async () => {
    const real = uniquePayload();
    // The forgery claims SUCCESSFUL for a transaction the service has as FAILED: contradicted on the first
    // attempt. (An id the service does not know is only rejected on a later attempt, once the service has
    // said so twice: a retry is a timer, outside the first attempt that waitUntil is given.)
    const failed = uniquePayload({ state: 'FAILED' });
    const ipn = ipnRouter({
      logger: quiet,
      verify: sourceOf({ [String(real.transaction_id)]: real, [String(failed.transaction_id)]: failed }),
    });
    const recorder = recordEvents(ipn);
    const handed: Array<Promise<unknown>> = [];
    const waitUntil = (p: Promise<unknown>) => void handed.push(p);

    const first = await ipn.fetch(post(real), { waitUntil });
    const forgery = { ...failed, state: 'SUCCESSFUL', custom_data: 'forged' };
    const forged = await ipn.fetch(post(forgery), { waitUntil });
    expect(recorder.names()).toEqual([]); // nothing emitted before the service answered
    await Promise.all(handed);

    expect([first.status, forged.status]).toEqual([200, 200]);
    expect(recorder.names().sort()).toEqual(['notification', 'rejected', 'successful']);
    expect(recorder.of('successful')[0]).toMatchObject({ transaction_id: real.transaction_id });
    expect(recorder.of('rejected')[0].notification).toMatchObject({ custom_data: 'forged' });
    await ipn.close();
  });

  test('a Cloudflare-style ctx is called as a method, keeping its this; a Next.js { params } is ignored', async () => {
    const ipn = ipnRouter({ logger: quiet });
    const ctx = {
      handed: [] as Array<Promise<unknown>>,
      waitUntil(promise: Promise<unknown>) {
        this.handed.push(promise);
      },
    };

    const withCtx = await ipn.fetch(post(uniquePayload()), ctx);
    const route = ipn.fetch as (request: Request, context: unknown) => Promise<Response>;
    const withParams = await route(post(uniquePayload()), { params: Promise.resolve({}) });

    expect([withCtx.status, withParams.status]).toEqual([200, 200]);
    expect(ctx.handed).toHaveLength(1);
    await ipn.close();
  });

  test('a waitUntil that throws is reported as error; the answer is still given', async () => {
    const ipn = ipnRouter({ logger: quiet });
    const recorder = recordEvents(ipn);

    const response = await ipn.fetch(post(successfulPayload({ transaction_id: 'WU.1' })), {
      waitUntil: () => {
        throw new Error('not in a request scope');
      },
    });

    expect(response.status).toBe(200);
    expect(recorder.names()).toEqual(['notification', 'successful', 'error']);
    await ipn.close();
  });
  test('a waitUntil that returns a rejected promise is reported as error, never an unhandled rejection', async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const ipn = ipnRouter({ logger: quiet });
      const recorder = recordEvents(ipn);

      // An async waitUntil of a platform or a host's own queue, refusing the work (typed `void` by
      // FetchContext, which a function returning a promise satisfies).
      const refuse: (promise: Promise<unknown>) => void = () =>
        Promise.reject(new Error('the queue is full')) as never;
      const response = await ipn.fetch(post(successfulPayload({ transaction_id: 'WU.2' })), {
        waitUntil: refuse,
      });

      expect(response.status).toBe(200);
      await until(() => recorder.count('error') === 1, 'the error event');
      expect(recorder.names()).toEqual(['notification', 'successful', 'error']);
      expect(recorder.of('error')[0].error).toMatchObject({ code: 'IPN_INTERNAL' });
      await ipn.close();
      await settle();
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });
});
