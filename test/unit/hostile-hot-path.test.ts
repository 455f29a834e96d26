/**
 * A hostile review of the hot path (issue 27): the validation fast path (`parseNotification`), synchronous
 * claims, the one-pass repeated-key check, readBody's callbacks and close() with work in flight. Each test
 * states what the old path (zod alone, promise chains) did and checks the new one still does it.
 */
import { PassThrough, Readable } from 'node:stream';
import { ipnRouter, MemoryStore, type Store } from '../../lib/index.js';
import { parseBody } from '../../lib/body/parse-body.js';
import { readBody } from '../../lib/body/read-body.js';
import { repeatedJsonKeys } from '../../lib/body/json-entries.js';
import {
  fastParse,
  IDENTITY_FIELDS,
  ipnNotificationSchema,
  parseNotification,
} from '../../lib/notification/schema.js';
import { recordEvents } from '../helpers/record-events.js';
import { quiet } from '../helpers/quiet-logger.js';
import { until } from '../helpers/until.js';

/** A value with every key order and `-0` kept visible: `toEqual` sees neither. */
function shape(value: unknown): unknown {
  if (typeof value === 'number') return Object.is(value, -0) ? '-0' : Number.isNaN(value) ? 'NaN' : value;
  if (typeof value !== 'object' || value === null) return value;
  if (Array.isArray(value)) return value.map(shape);
  return Object.entries(value).map(([key, item]) => [key, shape(item)]);
}

/** The router's record for a raw JSON text, as parseBody makes it. */
function recordOf(text: string): Record<string, unknown> {
  const parsed = parseBody(Buffer.from(text), 'json');
  if (!parsed.ok) throw new TypeError(`expected a record: ${parsed.message}`);
  return parsed.record;
}

const ID = '"transaction_id":"EFB.001158","state":"SUCCESSFUL"';

/** Raw JSON values put in each field: the odd numbers, prototype names, arrays, strings that look like numbers. */
const RAW_VALUES = [
  '-0',
  '0',
  '1E400',
  '-1E400',
  '12345678901234567890',
  '1.10',
  '"-0"',
  '"NaN"',
  '"Infinity"',
  '" 12.50 "',
  '"1e3"',
  '"0x10"',
  'true',
  'null',
  '[]',
  '[1,"a"]',
  '{"a":{"b":[1,2]}}',
  '{"constructor":{"prototype":1}}',
  '{"__proto__":{"x":1}}',
  '"\\u00e9"',
  '""',
];
const FIELDS = [
  'custom_data',
  'amount',
  'fee',
  'comission',
  'commission',
  'provider_id',
  'destination',
  'p_id',
  'currency',
  'extra',
  'toString',
  'valueOf',
  '__proto__',
  'constructor',
  'rawState',
  'customData',
  '1',
];

describe('the validation fast path against zod, on records the router really makes', () => {
  const texts: string[] = [];
  for (const field of FIELDS) for (const raw of RAW_VALUES) texts.push(`{${ID},"${field}":${raw}}`);
  for (const state of ['SUCCESS', 'FAILED', 'PENDING1', 'constructor', '__proto__', 'toString', 'SUCCESS ']) {
    texts.push(`{"transaction_id":"EFB.1","state":${JSON.stringify(state)}}`);
  }
  texts.push(`{${ID},"comission":5,"commission":""}`, `{${ID},"reponse":"a","response":null}`);
  texts.push(`{"2":"b",${ID},"1":"a","-1":"c","01":"d"}`);

  it.each(texts)('gives zod’s value, key order and -0 included, or leaves it to zod: %s', (text) => {
    const record = recordOf(text);
    const zod = ipnNotificationSchema.safeParse(record);
    const router = parseNotification(record);
    expect(router.success).toBe(zod.success);
    if (zod.success && router.success) expect(shape(router.data)).toEqual(shape(zod.data));
    // Whatever zod refuses, the fast path does not answer.
    if (!zod.success) expect(fastParse(record)).toBeUndefined();
  });

  it('takes custom_data as its exact source text on the fast path too (integers above 2^53, decimals, -0)', () => {
    for (const raw of ['12345678901234567890', '1.10', '-0', '1E400', '{"id":12345678901234567890}']) {
      const notification = fastParse(recordOf(`{${ID},"custom_data":${raw}}`));
      expect(notification?.custom_data).toBe(raw);
    }
  });

  it('never takes a state named like an Object.prototype member for a success, nor refuses it', () => {
    for (const state of ['constructor', '__proto__', 'hasOwnProperty', 'toString']) {
      const parsed = parseNotification(recordOf(`{"transaction_id":"EFB.1","state":"${state}"}`));
      expect(parsed.success && parsed.data.state).toBe(state);
      expect(parsed.success && parsed.data.rawState).toBeUndefined();
    }
  });
});

describe('the one-pass repeated-key check', () => {
  it.each([
    ['a repeated state', `{"transaction_id":"A","state":"FAILED","state":"SUCCESSFUL"}`, ['state']],
    ['a \\u-escaped state', `{"transaction_id":"A","state":"FAILED","st\\u0061te":"SUCCESSFUL"}`, ['state']],
    ['a fully escaped state', `{"transaction_id":"A","state":"FAILED","\\u0073tate":"X"}`, ['state']],
    [
      'an escaped transaction_id',
      `{"transaction_id":"A","transaction\\u005fid":"B","state":"S"}`,
      ['transaction_id'],
    ],
    [
      'custom_data as number then text',
      `{"transaction_id":"A","state":"S","custom_data":1,"custom_data":"1"}`,
      ['custom_data'],
    ],
    ['whitespace around the colons', `{"transaction_id":"A" , "state" : "S" , "state"\n:\t"F"}`, ['state']],
    ['state inside a nested object', `{"transaction_id":"A","state":"S","x":{"state":"F"}}`, []],
    ['state inside a string', `{"transaction_id":"A","state":"S","x":"\\"state\\":\\"F\\""}`, []],
    [
      'state as a value and in an array',
      `{"transaction_id":"A","state":"S","x":"state","y":["state","state"]}`,
      [],
    ],
    ['a key ending in a backslash before "state"', `{"transaction_id":"A","state":"S","a\\\\":"state"}`, []],
    ['an informational key repeated', `{"transaction_id":"A","state":"S","amount":1,"amount":2}`, []],
  ])('%s', (_name, text, repeated) => {
    JSON.parse(text); // each case is valid JSON: the check's precondition
    expect(repeatedJsonKeys(text, IDENTITY_FIELDS)).toEqual(repeated);
    const parsed = parseBody(Buffer.from(text), 'json');
    expect(parsed.ok).toBe(repeated.length === 0);
  });
});

describe('readBody, the body split at every byte', () => {
  // A BOM, a two-byte, a three-byte and a four-byte character: every split lands inside one somewhere.
  const text = '\ufeff{"transaction_id":"EFB.1","state":"SUCCESSFUL","customer_name":"Zoé 東京 😀"}';
  const bytes = Buffer.from(text);

  it.each([undefined, 'utf8', 'latin1'] as const)(
    'gives the same bytes whatever the split (setEncoding: %s), and the router reads the name exactly',
    async (encoding) => {
      for (let at = 0; at <= bytes.length; at += 1) {
        const source = new PassThrough();
        if (encoding) source.setEncoding(encoding);
        const read = readBody(source, 1024);
        source.write(bytes.subarray(0, at));
        source.end(bytes.subarray(at));
        const result = await read;
        expect(result.ok && result.body.equals(bytes)).toBe(true);
        const record = result.ok ? recordOf(result.body.toString()) : {};
        expect(record.customer_name).toBe('Zoé 東京 😀');
      }
    },
  );
});

/** POSTs one JSON body to a router through its fetch handler; the work after the answer is awaited. */
async function post(
  ipn: ReturnType<typeof ipnRouter>,
  body: string,
): Promise<{ status: number; text: string }> {
  const work: Array<Promise<unknown>> = [];
  const response = await ipn.fetch(
    new Request('http://ipn.test/ipn', {
      method: 'POST',
      body,
      headers: { 'content-type': 'application/json' },
    }),
    { waitUntil: (promise) => void work.push(promise) },
  );
  const text = await response.text();
  await Promise.all(work);
  return { status: response.status, text };
}

const BODY = '{"transaction_id":"EFB.HOT1","state":"SUCCESSFUL","custom_data":"order-1"}';

describe('a synchronous store on the promise-free claim', () => {
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown): void => void unhandled.push(reason);
  beforeAll(() => process.on('unhandledRejection', onUnhandled));
  afterAll(() => process.off('unhandledRejection', onUnhandled));
  beforeEach(() => void unhandled.splice(0));

  const failing: Array<[string, () => Store['claim']]> = [
    [
      'throws',
      () => () => {
        throw new Error('claim threw');
      },
    ],
    [
      'throws a non-Error',
      () => () => {
        throw 42; // eslint-disable-line @typescript-eslint/only-throw-error
      },
    ],
    ['returns a rejected promise', () => () => Promise.reject(new Error('claim rejected'))],
    ['returns "OK" (not a boolean)', () => () => 'OK' as unknown as boolean],
    ['returns undefined', () => () => undefined as unknown as boolean],
    [
      'returns a thenable whose then throws',
      () => () =>
        ({
          then: () => {
            throw new Error('then threw');
          },
        }) as unknown as Promise<boolean>,
    ],
  ];

  it.each(failing)(
    'answers 503 with an error event, delivers nothing, when claim %s',
    async (_name, claim) => {
      const ipn = ipnRouter({ store: { claim: claim(), release: () => {} }, logger: quiet });
      const recorder = recordEvents(ipn);
      const { status } = await post(ipn, BODY);
      expect(status).toBe(503);
      await until(() => recorder.count('error') === 1, 'the error event');
      expect(recorder.count('notification')).toBe(0);
      await ipn.close();
      expect(unhandled).toEqual([]);
    },
  );

  it('a listener that throws synchronously: 200, one error event, the resend a duplicate', async () => {
    const ipn = ipnRouter({ store: new MemoryStore(), logger: quiet });
    const recorder = recordEvents(ipn);
    ipn.on('notification', () => {
      throw new Error('listener threw');
    });
    expect((await post(ipn, BODY)).status).toBe(200);
    expect((await post(ipn, BODY)).text).toBe('{"ok":true,"duplicate":true}');
    expect(recorder.names()).toEqual(['notification', 'error', 'successful', 'duplicate']);
    expect(recorder.of('error')[0].error.message).toContain('listener threw');
    await ipn.close();
    expect(unhandled).toEqual([]);
  });
});

describe('close() as a synchronous claim is answered', () => {
  // close() called from a microtask n ticks after the claim: every point between the claim and the answer.
  it.each(Array.from({ length: 12 }, (_, ticks) => ticks))(
    'close() %i microtasks after the claim still waits for the listener before closing the store',
    async (ticks) => {
      const log: string[] = [];
      const memory = new MemoryStore();
      let closing: Promise<void> | undefined;
      const ipn = ipnRouter({
        logger: quiet,
        store: {
          claim(key, ttlMs) {
            let left = ticks;
            const later = (): void => {
              if (left-- > 0) queueMicrotask(later);
              else closing = ipn.close();
            };
            queueMicrotask(later);
            return memory.claim(key, ttlMs); // MemoryStore needs no token
          },
          release: (key) => memory.release(key),
          close: () => void log.push('store closed'),
        },
      });
      let finishListener = (): void => {};
      ipn.on('notification', async () => {
        log.push('listener started');
        await new Promise<void>((resolve) => (finishListener = resolve));
        log.push('listener done');
      });
      const answer = post(ipn, BODY);
      await until(() => closing !== undefined, 'close() to be called');
      await until(() => log.includes('listener started'), 'the listener');
      expect(log).not.toContain('store closed'); // the listener still runs: the store stays open
      finishListener();
      await closing;
      expect((await answer).status).toBe(200);
      expect(log).toEqual(['listener started', 'listener done', 'store closed']);
    },
  );
});

describe('a request aborted mid-body', () => {
  it('claims nothing, so the full resend is processed', async () => {
    const ipn = ipnRouter({ store: new MemoryStore(), logger: quiet });
    const recorder = recordEvents(ipn);
    const stream = new Readable({ read() {} });
    const half = Buffer.from(BODY).subarray(0, 30);
    stream.push(half);
    const work: Array<Promise<unknown>> = [];
    const answered = ipn.fetch(
      new Request('http://ipn.test/ipn', {
        method: 'POST',
        body: Readable.toWeb(stream),
        headers: { 'content-type': 'application/json' },
        duplex: 'half',
      }),
      { waitUntil: (promise) => void work.push(promise) },
    );
    await until(() => stream.readableFlowing !== null, 'the router to read');
    stream.destroy(new Error('client went away'));
    expect((await answered).status).toBe(400);
    await Promise.all(work);
    expect(recorder.count('notification')).toBe(0);
    expect((await post(ipn, BODY)).status).toBe(200);
    expect(recorder.names()).toEqual(['invalid', 'notification', 'successful']);
    await ipn.close();
  });
});
