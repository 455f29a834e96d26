import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import fc from 'fast-check';
import { z } from 'zod';
import { ipnRouter, type IpnRouter } from '../../lib/index.js';
import { MAX_DEPTH } from '../../lib/body/parse-body.js';
import { successfulPayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, settle, type Running } from '../helpers/servers.js';
import { until } from '../helpers/until.js';

/**
 * Whatever arrives at the IPN address (any bytes, any JSON, hostile keys, any content type, charset and
 * encoding, any size around the limit, any method), the router answers one of its documented statuses with a
 * JSON body, emits exactly the events that answer implies, never hangs, and never lets a payload reach
 * Object.prototype, even through a listener that merges the notification naively.
 */

// Each property is bounded by its numRuns; the timeout leaves room for a loaded machine.
jest.setTimeout(60_000);

const LIMIT = 2048; // '2kb': bodies above it are cheap to build
const SECRET = 'property-test-secret-0123456789';
/** A generous bound on one request: a request that needs it has hung. Not a timing assertion. */
const REQUEST_BOUND_MS = 10_000;
const RUNS = { numRuns: 150 };
const FORBIDDEN = ['__proto__', 'constructor', 'prototype'];
const INVALID_STATUSES = [400, 401, 413, 415];

// ---- what is sent ----

interface Sent {
  method: string;
  body: Buffer;
  contentType: string | undefined;
  contentEncoding: string | undefined;
  /** Sent as a stream without Content-Length (chunked), instead of a Buffer with one. */
  chunked: boolean;
  /** The `token` query parameter, for the router with a secret. */
  token: string | undefined;
}

const printable = (maxLength: number) =>
  fc.string({
    unit: fc.integer({ min: 0x20, max: 0x7e }).map((code) => String.fromCharCode(code)),
    maxLength,
  });

const hostileKey = fc.oneof(
  fc.constantFrom(
    '__proto__',
    'constructor',
    'prototype',
    'transaction_id',
    'state',
    'custom_data',
    'comission',
    'commission',
    'customData',
    'customDataError',
    'amount',
    'toString',
    'hasOwnProperty',
  ),
  fc.string({ maxLength: 12 }),
);

/** A value that pollutes Object.prototype if merged naively under `__proto__` or `constructor`. */
const pollutingValue = fc.constantFrom<unknown>(
  { polluted: true },
  { prototype: { polluted: true } },
  { __proto__: { polluted: true } },
  [{ __proto__: { polluted: true } }],
);

/** JSON source text kept as it is written, such as a number too large for a double. */
class RawJson {
  constructor(readonly text: string) {}
}

/** JSON object text written by hand, so keys may repeat and may be spelled with escapes. */
function objectText(entries: ReadonlyArray<readonly [string, unknown]>, escapeKeys: boolean): string {
  const key = (name: string): string =>
    escapeKeys
      ? `"${[...name].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`).join('')}"`
      : JSON.stringify(name);
  // JSON.stringify of a literal `{ __proto__: ... }` drops the key: write nested polluting values by hand too.
  const value = (item: unknown): string =>
    item instanceof RawJson
      ? item.text
      : item !== null && typeof item === 'object' && !Array.isArray(item)
        ? `{${Object.getOwnPropertyNames(item)
            .map((name) => `${JSON.stringify(name)}:${value((item as Record<string, unknown>)[name])}`)
            .concat(inheritedFrom(item).map((proto) => `"__proto__":${value(proto)}`))
            .join(',')}}`
        : Array.isArray(item)
          ? `[${item.map(value).join(',')}]`
          : (JSON.stringify(item) ?? 'null');
  return `{${entries.map(([name, item]) => `${key(name)}:${value(item)}`).join(',')}}`;
}

/** A literal `{ __proto__: x }` sets the prototype to `x`: written back as a `"__proto__"` key. */
function inheritedFrom(item: object): object[] {
  const proto: unknown = Object.getPrototypeOf(item);
  return proto === null || proto === Object.prototype ? [] : [proto as object];
}

const transactionId = fc.oneof(
  { weight: 6, arbitrary: fc.stringMatching(/^[A-Z]{2,4}[._:-][0-9]{1,9}$/) },
  fc.string({ maxLength: 20 }),
  fc.constantFrom('', 'a'.repeat(128), 'a'.repeat(129), '.EFB', 'EFB 001', 'EFB.001\n'),
);
const stateValue = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom('SUCCESSFUL', 'FAILED', 'PENDING', 'PENDING1', 'successful') },
  fc.constantFrom('SUCCESSFUL ', '', 'SUCCESS FUL', 'FAILED\n'),
  fc.string({ maxLength: 12 }),
);
const identityValue = (text: fc.Arbitrary<string>) =>
  fc.oneof({ weight: 8, arbitrary: text }, { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 2 }) });

/** A notification-shaped object: the identity fields with any values, hostile extra keys, optional padding. */
const notificationText = fc
  .record({
    transaction_id: identityValue(transactionId),
    state: identityValue(stateValue),
    custom_data: fc.oneof(
      fc.string({ maxLength: 30 }),
      fc.jsonValue({ maxDepth: 2 }),
      fc.constant('{"orderId":"order-1"}'),
      fc.constantFrom('12345678901234567891', '12.30', '-0', '1e400').map((text) => new RawJson(text)),
    ),
    extra: fc.array(fc.tuple(hostileKey, fc.oneof(fc.jsonValue({ maxDepth: 2 }), pollutingValue)), {
      maxLength: 4,
    }),
    omit: fc.oneof(
      { weight: 4, arbitrary: fc.constant<string[]>([]) },
      fc.subarray(['transaction_id', 'state', 'custom_data']),
    ),
    padding: fc.constantFrom(0, 0, 0, 0, 0, 1_500, 2_100, 3_000),
    escapeKeys: fc.boolean(),
  })
  .map(({ omit, extra, padding, escapeKeys, ...identity }) => {
    const base = Object.entries({ ...successfulPayload(), ...identity }).filter(
      ([key]) => !omit.includes(key),
    );
    const entries: Array<readonly [string, unknown]> = [...base, ...extra];
    if (padding > 0) entries.push(['note', 'x'.repeat(padding)]);
    return objectText(entries, escapeKeys);
  });

/** A notification as the service sends it, with any id, state and custom_data of the right shape. */
const wellFormedText = fc
  .record({
    transaction_id: fc.stringMatching(/^[A-Z]{2,4}[._:-][0-9]{1,9}$/),
    state: fc.constantFrom('SUCCESSFUL', 'FAILED', 'PENDING1'),
    custom_data: fc.string({ maxLength: 40 }),
  })
  .map((identity) => JSON.stringify(successfulPayload(identity)));

const hostileObjectText = fc
  .tuple(
    fc.array(fc.tuple(hostileKey, fc.oneof(fc.jsonValue({ maxDepth: 3 }), pollutingValue)), { maxLength: 8 }),
    fc.boolean(),
  )
  .map(([entries, escapeKeys]) => objectText(entries, escapeKeys));

const formText = fc
  .array(
    fc.tuple(
      fc.oneof(hostileKey, fc.constantFrom('__proto__[polluted]', 'constructor[prototype][polluted]', 'a[]')),
      fc.oneof(fc.string({ maxLength: 20 }), fc.constantFrom('SUCCESSFUL', 'FAILED', 'EFB.001158', 'true')),
    ),
    { maxLength: 10 },
  )
  .map((entries) => new URLSearchParams(entries).toString());

const bodyText = fc.oneof(
  { weight: 4, arbitrary: wellFormedText },
  { weight: 6, arbitrary: notificationText },
  { weight: 2, arbitrary: hostileObjectText },
  { weight: 2, arbitrary: fc.jsonValue().map((value) => JSON.stringify(value)) },
  { weight: 1, arbitrary: formText },
  { weight: 1, arbitrary: fc.string({ maxLength: 200 }) },
  { weight: 1, arbitrary: fc.constantFrom('', '{', '{}', '[]', 'null', '"x"', '42', '\ufeff{}', '{"a":1}{') },
);

const body = fc.oneof(
  { weight: 5, arbitrary: bodyText.map((text) => Buffer.from(text)) },
  { weight: 1, arbitrary: bodyText.map((text) => Buffer.from(text, 'latin1')) },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 300 }).map((bytes) => Buffer.from(bytes)) },
  { weight: 1, arbitrary: fc.uint8Array({ minLength: 1_900, maxLength: 2_600 }).map((b) => Buffer.from(b)) },
);

const contentType = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      undefined,
      'application/json',
      'application/json; charset=utf-8',
      'application/x-www-form-urlencoded',
    ),
  },
  fc.constantFrom(
    'application/json; charset="UTF-8"',
    'application/json; charset=iso-8859-1',
    'application/json; charset=utf-16le',
    'application/json; charset=bogus',
    'application/json; charset=',
    'text/json',
    'application/vnd.provider.ipn+json',
    'application/x-www-form-urlencoded',
    'application/x-www-form-urlencoded; charset=iso-8859-1',
    'text/plain',
    'text/plain; charset=utf-8',
    'multipart/form-data; boundary=x',
    'application/octet-stream',
    '',
    ';',
    '/json',
  ),
  printable(40),
);

const encoding = fc.constantFrom(
  undefined,
  undefined,
  undefined,
  undefined,
  undefined,
  undefined,
  'identity',
  'gzip',
  'deflate',
  'br',
  'GZIP',
  'compress',
  'gzip, br',
  'constructor',
);

const COMPRESS: Record<string, (input: Buffer) => Buffer> = {
  gzip: gzipSync,
  deflate: deflateSync,
  br: brotliCompressSync,
};

const method = fc.oneof(
  { weight: 12, arbitrary: fc.constant('POST') },
  { weight: 1, arbitrary: fc.constantFrom('GET', 'HEAD', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'PURGE') },
);

const token = fc.oneof(
  fc.constant(SECRET),
  fc.constant(undefined),
  fc.string({ maxLength: 40 }),
  fc.constantFrom('', SECRET.slice(1), `${SECRET} `),
);

const request = (tokens: fc.Arbitrary<string | undefined>): fc.Arbitrary<Sent> =>
  fc
    .record({
      method,
      body,
      contentType,
      contentEncoding: encoding,
      compress: fc.boolean(),
      chunked: fc.boolean(),
      token: tokens,
    })
    .map(({ compress, ...sent }) => {
      const compressor = COMPRESS[sent.contentEncoding?.toLowerCase() ?? ''];
      return { ...sent, body: compress && compressor ? compressor(sent.body) : sent.body };
    });

/** Requests every run starts with: first deliveries in each format, and a resend. */
const EXAMPLES: Array<[Sent]> = (() => {
  const json = Buffer.from(JSON.stringify(successfulPayload({ transaction_id: 'EXAMPLE.1' })));
  const form = Buffer.from(
    new URLSearchParams({ transaction_id: 'EXAMPLE.2', state: 'FAILED', custom_data: 'x' }).toString(),
  );
  const plain: Sent = {
    method: 'POST',
    body: json,
    contentType: 'application/json',
    contentEncoding: undefined,
    chunked: false,
    token: undefined,
  };
  return [
    [plain],
    [{ ...plain, chunked: true }], // a resend of the first
    [{ ...plain, body: form, contentType: 'application/x-www-form-urlencoded' }],
    [
      {
        ...plain,
        body: gzipSync(json.toString().replace('EXAMPLE.1', 'EXAMPLE.3')),
        contentEncoding: 'gzip',
      },
    ],
  ];
})();

// ---- sending it ----

interface Answer {
  status: number;
  allow: string | null;
  contentType: string | null;
  json: unknown;
}

async function send(url: string, sent: Sent): Promise<Answer> {
  const headers: Record<string, string> = {};
  if (sent.contentType !== undefined) headers['content-type'] = sent.contentType;
  if (sent.contentEncoding !== undefined) headers['content-encoding'] = sent.contentEncoding;
  const withBody = sent.method !== 'GET' && sent.method !== 'HEAD';
  const target = sent.token === undefined ? url : `${url}/?token=${encodeURIComponent(sent.token)}`;
  const response = await fetch(target, {
    method: sent.method,
    headers,
    signal: AbortSignal.timeout(REQUEST_BOUND_MS),
    ...(withBody ? { body: sent.chunked ? streamOf(sent.body) : sent.body } : {}),
    ...(withBody && sent.chunked ? { duplex: 'half' as const } : {}),
  });
  const text = await response.text();
  let json: unknown;
  try {
    json = sent.method === 'HEAD' ? undefined : JSON.parse(text);
  } catch {
    json = { notJson: text };
  }
  return {
    status: response.status,
    allow: response.headers.get('allow'),
    contentType: response.headers.get('content-type'),
    json,
  };
}

function streamOf(bytes: Buffer): ReadableStream<Uint8Array> {
  return new ReadableStream({
    start(controller) {
      // Two chunks, so that the router sees a body that arrives in parts.
      const half = Math.floor(bytes.length / 2);
      if (half > 0) controller.enqueue(bytes.subarray(0, half));
      if (bytes.length - half > 0) controller.enqueue(bytes.subarray(half));
      controller.close();
    },
  });
}

// ---- what must hold ----

/** The own keys of a value at any depth that are named like a prototype. */
function forbiddenKeysIn(value: unknown, seen = new Set<unknown>()): string[] {
  if (value === null || typeof value !== 'object' || seen.has(value)) return [];
  seen.add(value);
  return Reflect.ownKeys(value).flatMap((key) =>
    typeof key === 'string' && FORBIDDEN.includes(key)
      ? [key]
      : forbiddenKeysIn((value as Record<PropertyKey, unknown>)[key], seen),
  );
}

/**
 * The naive deep merge many apps run on a payload (`_.merge` before its fixes): it pollutes if given the
 * chance. It follows only the prototype keys into inherited members, so that a harmless key such as
 * `toString` does not make the merge itself write onto a built-in function.
 */
function naiveMerge(target: Record<string, any>, source: Record<string, any>): void {
  for (const key of Object.keys(source)) {
    const value = source[key];
    if (value !== null && typeof value === 'object') {
      const current = Object.hasOwn(target, key) || FORBIDDEN.includes(key) ? target[key] : undefined;
      if (current === null || (typeof current !== 'object' && typeof current !== 'function'))
        target[key] = {};
      naiveMerge(target[key], value);
    } else target[key] = value;
  }
}

const prototypeKeys = () => ({
  object: Object.getOwnPropertyNames(Object.prototype).sort(),
  array: Object.getOwnPropertyNames(Array.prototype).sort(),
});

type Recorder = ReturnType<typeof recordEvents>;
const NAMES = ['notification', 'successful', 'failed', 'duplicate', 'invalid', 'error'] as const;
const counts = (recorder: Recorder) => Object.fromEntries(NAMES.map((name) => [name, recorder.count(name)]));

/**
 * Checks one answer, and the events it produced, against the router's documented behaviour. `earlier` is
 * every event before them: a `FAILED` for a transaction delivered as `SUCCESSFUL` before is a `conflict`.
 */
function checkAnswer(
  sent: Sent,
  answer: Answer,
  events: Recorder['events'],
  withSecret: boolean,
  earlier: Recorder['events'],
): void {
  const allowed = withSecret ? [200, 400, 401, 405, 413, 415] : [200, 400, 405, 413, 415];
  expect(allowed).toContain(answer.status);
  expect(answer.contentType).toMatch(/^application\/json/);
  const body = answer.json as Record<string, unknown> | undefined;
  if (sent.method !== 'HEAD') {
    expect(typeof body).toBe('object');
    expect(body?.ok === true || typeof body?.error === 'string').toBe(true);
  }
  const names = events.map((event) => event.name);
  const count = (name: string) => names.filter((n) => n === name).length;

  if (sent.method === 'GET' || sent.method === 'HEAD') expect(answer.status).toBe(200);
  else if (sent.method !== 'POST') {
    expect(answer.status).toBe(405);
    expect(answer.allow).toBe('GET, HEAD, POST');
  } else if (withSecret && sent.token !== SECRET) expect(answer.status).toBe(401);
  else if (sent.body.length > LIMIT && [undefined, 'identity'].includes(sent.contentEncoding))
    expect([413, 415]).toContain(answer.status);
  if (answer.status === 401) expect(withSecret && sent.method === 'POST' && sent.token !== SECRET).toBe(true);

  // `invalid` exactly for a rejected request, with the answer's status and reason.
  const invalid = INVALID_STATUSES.includes(answer.status);
  expect(count('invalid')).toBe(invalid ? 1 : 0);
  if (invalid) {
    const event = events.find((e) => e.name === 'invalid')!.payload;
    expect(event.status).toBe(answer.status);
    expect(event.reason).toBe(body?.error);
    expect(forbiddenKeysIn(event.received)).toEqual([]);
  }
  // Deliveries only for a POST answered 200 as a first delivery; `duplicate` only for one answered as a resend.
  const first =
    sent.method === 'POST' && answer.status === 200 && body?.ok === true && body.duplicate !== true;
  const resend = sent.method === 'POST' && answer.status === 200 && body?.duplicate === true;
  // A first FAILED of a transaction already delivered as SUCCESSFUL is answered 200 and emitted as `conflict`
  // only (README, events): the paid order is never undone. Any other first delivery is a `notification`.
  const paid = new Set(earlier.filter((e) => e.name === 'successful').map((e) => e.payload.transaction_id));
  const conflict = events.find((e) => e.name === 'conflict')?.payload;
  expect(count('conflict')).toBe(conflict && first ? 1 : 0);
  if (conflict) {
    expect(conflict.accepted).toBe('SUCCESSFUL');
    expect(conflict.notification.state).toBe('FAILED');
    expect(paid.has(conflict.notification.transaction_id)).toBe(true);
  }
  expect(count('notification')).toBe(first && !conflict ? 1 : 0);
  expect(count('duplicate')).toBe(resend ? 1 : 0);
  const delivered = events.find((e) => e.name === 'notification')?.payload;
  if (delivered?.state === 'FAILED') expect(paid.has(delivered.transaction_id)).toBe(false);
  expect(count('successful')).toBe(delivered?.state === 'SUCCESSFUL' ? 1 : 0);
  expect(count('failed')).toBe(delivered?.state === 'FAILED' ? 1 : 0);
  expect(count('error')).toBe(0);
  if (delivered) {
    expect(delivered.transaction_id).toMatch(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/);
    expect(typeof delivered.custom_data).toBe('string');
    expect((delivered.customData === undefined) !== (delivered.customDataError === undefined)).toBe(true);
  }
}

describe('the router, whatever it is sent (property)', () => {
  const routers: IpnRouter<any>[] = [];
  const servers: Running[] = [];
  const before = prototypeKeys();
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown) => unhandled.push(reason);

  beforeAll(() => process.on('unhandledRejection', onUnhandled));
  afterAll(async () => {
    process.off('unhandledRejection', onUnhandled);
    await Promise.all(servers.splice(0).map((server) => server.close()));
    await Promise.all(routers.splice(0).map((router) => router.close()));
  });
  afterEach(() => {
    expect(unhandled).toEqual([]);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(([] as unknown as Record<string, unknown>).polluted).toBeUndefined();
    expect(prototypeKeys()).toEqual(before);
  });

  async function start(secret?: string) {
    const ipn = ipnRouter({
      limit: '2kb',
      logger: quiet,
      customData: z.object({ orderId: z.string() }),
      ...(secret ? { secret } : {}),
    });
    const recorder = recordEvents(ipn);
    // What a careless host does with a payload: merge it into its own objects.
    for (const name of ['notification', 'duplicate'] as const)
      ipn.on(name, (n: object) => naiveMerge({}, n as Record<string, unknown>));
    ipn.on('invalid', (event) => {
      if (event.received !== null && typeof event.received === 'object')
        naiveMerge({}, event.received as Record<string, unknown>);
    });
    routers.push(ipn);
    const running = await listen(ipn);
    servers.push(running);
    return { recorder, url: running.url, server: running.server };
  }

  test('answers every request with a documented status and a JSON body, and emits exactly the events that answer implies', async () => {
    const { recorder, url } = await start();
    await fc.assert(
      fc.asyncProperty(request(fc.constant(undefined)), async (sent) => {
        const from = recorder.events.length;
        const answer = await send(url, sent);
        await settle();
        checkAnswer(sent, answer, recorder.events.slice(from), false, recorder.events.slice(0, from));
        expect(({} as Record<string, unknown>).polluted).toBeUndefined();
      }),
      { ...RUNS, examples: EXAMPLES },
    );
    // The generated requests reached the deliveries too, not only the rejections.
    const seen = counts(recorder);
    expect(seen.notification).toBeGreaterThan(EXAMPLES.length);
    expect(seen.duplicate).toBeGreaterThan(0);
    expect(seen.invalid).toBeGreaterThan(0);
  });

  test('with a secret, only a POST that carries the token gets past 401, and nothing else changes', async () => {
    const { recorder, url } = await start(SECRET);
    await fc.assert(
      fc.asyncProperty(request(token), async (sent) => {
        const from = recorder.events.length;
        const answer = await send(url, sent);
        await settle();
        checkAnswer(sent, answer, recorder.events.slice(from), true, recorder.events.slice(0, from));
      }),
      RUNS,
    );
    expect(recorder.events.some((event) => event.name === 'invalid' && event.payload.status === 401)).toBe(
      true,
    );
  });

  test('hostile JSON objects (prototype keys, escaped keys, repeated identity fields) never pollute a prototype, even merged naively', async () => {
    const { recorder, url } = await start();
    const hostile = fc.record({
      text: fc.oneof(notificationText, hostileObjectText),
      contentType: fc.constantFrom(undefined, 'application/json', 'application/x-www-form-urlencoded'),
    });
    await fc.assert(
      fc.asyncProperty(hostile, async ({ text, contentType: type }) => {
        const sent: Sent = {
          method: 'POST',
          body: Buffer.from(text),
          contentType: type,
          contentEncoding: undefined,
          chunked: false,
          token: undefined,
        };
        const from = recorder.events.length;
        const answer = await send(url, sent);
        await settle();
        checkAnswer(sent, answer, recorder.events.slice(from), false, recorder.events.slice(0, from));
        for (const event of recorder.events.slice(from)) expect(forbiddenKeysIn(event.payload)).toEqual([]);
      }),
      { numRuns: 200 },
    );
  });

  test('a client that goes away mid-body gets no delivery, only an invalid event, and the router keeps answering', async () => {
    const { recorder, url, server } = await start();
    await fc.assert(
      fc.asyncProperty(notificationText, async (text) => {
        const from = recorder.events.length;
        const abort = new AbortController();
        // Aborted once the router has the request: before that, there is nothing for it to see.
        const arrived = new Promise<void>((resolve) => server.once('request', () => resolve()));
        const bytes = Buffer.from(text);
        const stream = new ReadableStream<Uint8Array>({
          start(controller) {
            // Half the body; the rest never comes: the client aborts instead.
            controller.enqueue(bytes.subarray(0, Math.max(1, bytes.length >> 1)));
          },
        });
        const pending = fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: stream,
          duplex: 'half',
          signal: abort.signal,
        }).catch((error: unknown) => error);
        await arrived;
        await settle();
        abort.abort();
        expect(await pending).toMatchObject({ name: 'AbortError' });
        await until(() => recorder.events.length > from, 'the invalid event', REQUEST_BOUND_MS);
        const events = recorder.events.slice(from);
        expect(events.map((event) => event.name)).toEqual(['invalid']);
        // Half a body over the limit is already refused (413); otherwise the router waits for the rest.
        expect(events[0]!.payload).toMatchObject(
          bytes.length >> 1 > LIMIT
            ? { reason: 'body_too_large', status: 413 }
            : { reason: 'request_aborted', status: 400 },
        );
      }),
      { numRuns: 30 },
    );
    const after = await send(url, {
      method: 'GET',
      body: Buffer.alloc(0),
      contentType: undefined,
      contentEncoding: undefined,
      chunked: false,
      token: undefined,
    });
    expect(after.status).toBe(200);
  });

  test('a valid notification is accepted up to the nesting bound and refused past it, escape or no escape elsewhere in the body', async () => {
    // Within the default limit (100kb), 15,000 levels of nesting fit (6 bytes a level at most). Past
    // MAX_DEPTH levels (the body's own object counted) the body is refused with 400 as it is parsed, before a
    // store or a listener copies it recursively and overflows the stack. The answer depends on the depth only,
    // never on an unrelated `\u` escape elsewhere (PHP's json_encode writes one for every non-ASCII letter),
    // which sends the body through the copy that drops prototype keys: that copy must not overflow either.
    const ipn = ipnRouter({ logger: quiet });
    routers.push(ipn);
    const recorder = recordEvents(ipn);
    const running = await listen(ipn);
    servers.push(running);
    const nested = fc.record({
      // Around the bound as often as anywhere up to 15,000 levels.
      depth: fc.oneof(fc.integer({ min: 1, max: MAX_DEPTH + 2 }), fc.integer({ min: 1, max: 15_000 })),
      kind: fc.constantFrom('array', 'object'),
      escape: fc.boolean(),
    });
    let sequence = 0;
    await fc.assert(
      fc.asyncProperty(nested, async ({ depth, kind, escape }) => {
        sequence += 1;
        const [open, close] = kind === 'array' ? ['[', ']'] : ['{"k":', '}'];
        const text =
          `{"transaction_id":"DEEP.${sequence}","state":"SUCCESSFUL","custom_data":"order-1",` +
          `"customer_name":"${escape ? 'Kon\\u00e9' : 'Kone'}",` +
          `"extra":${open.repeat(depth)}${kind === 'array' ? '' : '1'}${close.repeat(depth)}}`;
        const from = recorder.events.length;
        const answer = await send(running.url, {
          method: 'POST',
          body: Buffer.from(text),
          contentType: 'application/json',
          contentEncoding: undefined,
          chunked: false,
          token: undefined,
        });
        const names = recorder.events.slice(from).map((event) => event.name);
        // The field holds `depth` levels, under the body's own object.
        if (depth + 1 <= MAX_DEPTH) {
          expect({ status: answer.status, body: answer.json }).toEqual({ status: 200, body: { ok: true } });
          expect(names).toEqual(['notification', 'successful']);
        } else {
          expect(answer.status).toBe(400);
          expect(answer.json).toMatchObject({ error: 'invalid_fields', issues: [{ path: 'extra' }] });
          expect(names).toEqual(['invalid']);
        }
      }),
      { numRuns: 40 },
    );
  });
});
