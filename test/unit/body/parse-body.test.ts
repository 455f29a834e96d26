import { MAX_DEPTH, parseBody, parseParsedBody } from '../../../lib/body/parse-body.js';
import type { ParseResult } from '../../../lib/body/parse-body.js';

/** The record of a body that must parse. */
function recordOf(result: ParseResult): Record<string, unknown> {
  if (!result.ok) throw new Error(`expected the body to parse: ${result.message}`);
  return result.record;
}

/** The failure of a body that must not parse. */
function failureOf(result: ParseResult) {
  if (result.ok) throw new Error('expected the body to be refused');
  return result;
}

const prototypeNames = Object.getOwnPropertyNames(Object.prototype).sort();

function expectNoPollution(): void {
  expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  expect(Object.getOwnPropertyNames(Object.prototype).sort()).toEqual(prototypeNames);
}

describe('parseBody', () => {
  describe('JSON', () => {
    it('parses a JSON object from bytes', () => {
      const raw = Buffer.from('{"transaction_id":"EFB.001158","amount":5000,"nested":{"a":[1,2]}}');
      expect(recordOf(parseBody(raw, 'json'))).toEqual({
        transaction_id: 'EFB.001158',
        amount: 5000,
        nested: { a: [1, 2] },
      });
    });

    it('parses a JSON object from a string', () => {
      expect(recordOf(parseBody('{"state":"FAILED"}', 'json'))).toEqual({ state: 'FAILED' });
    });

    it('strips a UTF-8 byte order mark before parsing', () => {
      const raw = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{"state":"FAILED"}')]);
      expect(recordOf(parseBody(raw, 'json'))).toEqual({ state: 'FAILED' });
    });

    it('strips a byte order mark from a string body too, like from the same bytes', () => {
      expect(recordOf(parseBody('\uFEFF{"state":"FAILED"}', 'json'))).toEqual({ state: 'FAILED' });
    });

    it('decodes a UTF-16LE body when the charset says so', () => {
      const raw = Buffer.from('{"customer_name":"Awa Koné","amount":5000}', 'utf16le');
      expect(recordOf(parseBody(raw, 'json', 'utf-16le'))).toEqual({
        customer_name: 'Awa Koné',
        amount: 5000,
      });
    });

    it('decodes a UTF-16LE body that starts with its byte order mark', () => {
      const raw = Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from('{"state":"FAILED"}', 'utf16le')]);
      expect(recordOf(parseBody(raw, 'json', 'utf-16le'))).toEqual({ state: 'FAILED' });
    });

    it('refuses malformed JSON as malformed_body, with the text received', () => {
      const failure = failureOf(parseBody(Buffer.from('{"state":'), 'json'));
      expect(failure.reason).toBe('malformed_body');
      expect(failure.message).toMatch(/not valid JSON/);
      expect(failure.received).toBe('{"state":');
    });

    it('truncates the text received of a long malformed body to 1024 characters and an ellipsis', () => {
      const text = `{${'x'.repeat(5000)}`;
      const failure = failureOf(parseBody(text, 'json'));
      expect(failure.reason).toBe('malformed_body');
      expect(failure.received).toBe(`${text.slice(0, 1024)}…`);
    });

    it('keeps a malformed body of exactly 1024 characters whole', () => {
      const text = `{${'x'.repeat(1023)}`;
      expect(failureOf(parseBody(text, 'json')).received).toBe(text);
    });

    it.each([
      ['an empty buffer', Buffer.alloc(0)],
      ['an empty string', ''],
      ['whitespace', ' \r\n '],
    ])('refuses %s as malformed_body, saying the body is empty', (_, raw) => {
      const failure = failureOf(parseBody(raw, 'json'));
      expect(failure.reason).toBe('malformed_body');
      expect(failure.message).toMatch(/empty/);
    });

    it.each([
      ['an array', '[{"state":"SUCCESSFUL"}]', [{ state: 'SUCCESSFUL' }]],
      ['a string', '"SUCCESSFUL"', 'SUCCESSFUL'],
      ['null', 'null', null],
      ['a number', '42', 42],
      ['a boolean', 'true', true],
    ])('refuses %s as not_an_object, saying what it got', (kind, text, value) => {
      const failure = failureOf(parseBody(text, 'json'));
      expect(failure.reason).toBe('not_an_object');
      expect(failure.message).toContain(kind);
      expect(failure.received).toEqual(value);
    });
  });

  describe('forms', () => {
    it('parses a url-encoded form into strings', () => {
      const raw = Buffer.from('transaction_id=EFB.001158&amount=5000&customer_name=Awa+Kon%C3%A9&hash=');
      expect(recordOf(parseBody(raw, 'form'))).toEqual({
        transaction_id: 'EFB.001158',
        amount: '5000',
        customer_name: 'Awa Koné',
        hash: '',
      });
    });

    it('refuses a repeated identity key rather than picking one value', () => {
      expect(parseBody('state=FAILED&state=SUCCESSFUL&transaction_id=A.1', 'form')).toMatchObject({
        ok: false,
        reason: 'invalid_fields',
        issues: [{ path: 'state', message: 'state appears more than once' }],
      });
    });

    it('reads a JSON object labelled as a form as JSON', () => {
      expect(recordOf(parseBody(' {"state":"FAILED","amount":"5"}', 'form'))).toEqual({
        state: 'FAILED',
        amount: '5',
      });
    });

    it('keeps every value of a key repeated three times, in order', () => {
      expect(recordOf(parseBody('a=1&a=2&a=3', 'form')).a).toEqual(['1', '2', '3']);
    });
  });

  describe('a body labelled neither JSON nor a form', () => {
    it('reads a JSON object as JSON, whatever the label', () => {
      expect(recordOf(parseBody('\n {"state":"FAILED","amount":5}', 'other'))).toEqual({
        state: 'FAILED',
        amount: 5,
      });
    });

    it('answers malformed_body for a broken JSON object, as under application/json', () => {
      expect(parseBody('{"state":', 'other')).toMatchObject({ ok: false, reason: 'malformed_body' });
    });

    it.each(['--x--', 'state=FAILED', '[{"state":"FAILED"}]', ''])(
      'refuses %p, which is not a JSON object, as unsupported_media_type',
      (text) => {
        expect(parseBody(text, 'other')).toMatchObject({ ok: false, reason: 'unsupported_media_type' });
      },
    );

    it('keeps an object a host parser already made of it', () => {
      expect(recordOf(parseParsedBody({ state: 'FAILED' }, 'other'))).toEqual({ state: 'FAILED' });
    });
  });

  describe('repeated identity keys in JSON', () => {
    it.each([
      ['state', '{"transaction_id":"A.1","state":"FAILED","custom_data":"","state":"SUCCESSFUL"}'],
      ['transaction_id', '{"transaction_id":"A.1","state":"FAILED","transaction_id":"A.2"}'],
      ['custom_data', '{"custom_data":"o-1","state":"FAILED","custom_data":"o-2"}'],
      ['state', '{"state":"FAILED","st\\u0061te":"SUCCESSFUL"}'],
    ])('refuses a JSON object that repeats %s', (path, text) => {
      expect(parseBody(text, 'json')).toMatchObject({
        ok: false,
        reason: 'invalid_fields',
        issues: [{ path }],
      });
    });

    it.each([
      [
        'a nested object with the same keys',
        '{"state":"FAILED","meta":{"state":"x","transaction_id":"y"},"transaction_id":"A.1"}',
      ],
      ['a value equal to a key name', '{"state":"FAILED","response":"state","note":"\\"state\\""}'],
      ['an array of objects', '{"state":"FAILED","items":[{"state":1},{"state":2}]}'],
    ])('accepts %s', (_case, text) => {
      expect(parseBody(text, 'json').ok).toBe(true);
    });
  });

  describe('nesting depth', () => {
    /** `depth` arrays inside each other, as JSON text. */
    const arrays = (depth: number) => `${'['.repeat(depth)}${']'.repeat(depth)}`;
    const objects = (depth: number) => `${'{"a":'.repeat(depth - 1)}{}${'}'.repeat(depth - 1)}`;

    it(`keeps a field nested up to ${MAX_DEPTH} levels, the body's own object counted`, () => {
      const record = recordOf(parseBody(`{"state":"FAILED","x":${arrays(MAX_DEPTH - 1)}}`, 'json'));
      expect(record.x).toEqual(JSON.parse(arrays(MAX_DEPTH - 1)));
    });

    it.each([
      ['arrays', arrays],
      ['objects', objects],
    ])('refuses a field of %s one level deeper as invalid_fields, naming each such field', (_, nest) => {
      const text = `{"state":"FAILED","x":${nest(MAX_DEPTH)},"ok":[1],"y":${nest(MAX_DEPTH + 5)}}`;
      const failure = failureOf(parseBody(text, 'json'));
      expect(failure).toMatchObject({
        reason: 'invalid_fields',
        message: expect.stringContaining(`more than ${MAX_DEPTH} levels deep (in x, y)`),
        issues: [
          { path: 'x', message: `x nests arrays or objects more than ${MAX_DEPTH} levels deep` },
          { path: 'y', message: `y nests arrays or objects more than ${MAX_DEPTH} levels deep` },
        ],
      });
      // What the invalid event receives: the record without the deep fields, safe to serialise.
      expect(failure.received).toEqual({ state: 'FAILED', ok: [1] });
    });

    it.each([
      ['arrays', arrays],
      ['objects', objects],
    ])('refuses %s nested 100,000 deep without overflowing, also on the prototype-key path', (_, nest) => {
      const deep = nest(100_000);
      // A `\u` escape sends the body through the copy that drops prototype keys, which must not overflow.
      for (const text of [`{"x":${deep}}`, `{"n":"\u0041","__proto__":{},"x":${deep}}`]) {
        expect(failureOf(parseBody(text, 'json'))).toMatchObject({
          reason: 'invalid_fields',
          issues: [{ path: 'x' }],
        });
      }
    });

    it('refuses a body that is itself nested too deep, naming the whole body, with an excerpt of it', () => {
      const failure = failureOf(parseBody(arrays(100_000), 'json'));
      expect(failure).toMatchObject({ reason: 'invalid_fields', issues: [{ path: '' }] });
      expect(failure.received).toBe(`${'['.repeat(1024)}…`);
    });

    it('refuses an object a host parser left nested too deep, without overflowing', () => {
      const deep: unknown = JSON.parse(`{"state":"FAILED","x":${objects(100_000)}}`);
      const failure = failureOf(parseParsedBody(deep, 'json'));
      expect(failure).toMatchObject({ reason: 'invalid_fields', issues: [{ path: 'x' }] });
      expect(failure.received).toEqual({ state: 'FAILED' });
    });
  });

  describe('prototype-polluting keys', () => {
    afterEach(expectNoPollution);

    it('drops __proto__, constructor and prototype at the top level of JSON', () => {
      const text =
        '{"__proto__":{"polluted":true},"constructor":{"prototype":{"polluted":true}},"prototype":1,"a":1}';
      const record = recordOf(parseBody(text, 'json'));
      expect(record).toEqual({ a: 1 });
      expect(Object.keys(record)).toEqual(['a']);
      expect(Object.hasOwn(record, '__proto__')).toBe(false);
      expect(Object.getPrototypeOf(record)).toBe(Object.prototype);
      expect(record.polluted).toBeUndefined();
    });

    it('drops them at any depth of JSON, inside objects and arrays', () => {
      const text = JSON.stringify({
        a: { b: { keep: 1, constructor: { prototype: { polluted: true } } } },
        list: [{ keep: 2, prototype: { polluted: true } }],
      }).replace('"keep":1', '"keep":1,"__proto__":{"polluted":true}');
      const record = recordOf(parseBody(text, 'json'));
      expect(record).toEqual({ a: { b: { keep: 1 } }, list: [{ keep: 2 }] });
      const inner = (record.a as { b: object }).b;
      expect(Object.keys(inner)).toEqual(['keep']);
      expect(Object.getPrototypeOf(inner)).toBe(Object.prototype);
    });

    it('drops a __proto__ key spelled with a unicode escape', () => {
      const text =
        '{"\\u005f_proto__":{"polluted":true},"nested":{"__pro\\u0074o__":{"polluted":true}},"a":1}';
      const record = recordOf(parseBody(text, 'json'));
      expect(record).toEqual({ nested: {}, a: 1 });
      expect(Object.hasOwn(record, '__proto__')).toBe(false);
      expect(Object.hasOwn(record.nested as object, '__proto__')).toBe(false);
    });

    it('drops __proto__, constructor and prototype from a form, also percent-encoded', () => {
      const text = '__proto__=x&constructor=y&prototype=z&%5F%5Fproto%5F%5F=w&state=FAILED';
      const record = recordOf(parseBody(text, 'form'));
      expect(record).toEqual({ state: 'FAILED' });
      expect(Object.keys(record)).toEqual(['state']);
      expect(Object.getPrototypeOf(record)).toBe(Object.prototype);
    });

    it('keeps a bracketed form key as a harmless flat key', () => {
      const record = recordOf(parseBody('__proto__[polluted]=1&state=FAILED', 'form'));
      expect(record.state).toBe('FAILED');
      expect(record.polluted).toBeUndefined();
    });
  });
});

describe('parseParsedBody', () => {
  afterEach(expectNoPollution);

  it('copies an object the host already parsed, leaving the original untouched', () => {
    const original = { state: 'FAILED', nested: { list: [1, { a: 2 }] } };
    const snapshot = structuredClone(original);
    const record = recordOf(parseParsedBody(original, 'json'));
    expect(record).toEqual(original);
    expect(record).not.toBe(original);
    expect(record.nested).not.toBe(original.nested);
    record.state = 'SUCCESSFUL';
    (record.nested as { list: unknown[] }).list.push(3);
    expect(original).toEqual(snapshot);
  });

  it('drops polluting keys from an object parsed by the host with JSON.parse, without mutating it', () => {
    const original = JSON.parse('{"__proto__":{"polluted":true},"a":{"constructor":{"prototype":{}},"b":1}}');
    const record = recordOf(parseParsedBody(original, 'json'));
    expect(record).toEqual({ a: { b: 1 } });
    expect(Object.hasOwn(record, '__proto__')).toBe(false);
    expect(Object.hasOwn(original, '__proto__')).toBe(true);
    expect(Object.hasOwn(original.a, 'constructor')).toBe(true);
  });

  it('parses a string left by a text parser like a raw body', () => {
    expect(recordOf(parseParsedBody('{"state":"FAILED"}', 'json'))).toEqual({ state: 'FAILED' });
    expect(failureOf(parseParsedBody('{"state":', 'json')).reason).toBe('malformed_body');
  });

  it('parses a Buffer left by a raw parser like a raw body', () => {
    expect(recordOf(parseParsedBody(Buffer.from('{"state":"FAILED"}'), 'json'))).toEqual({ state: 'FAILED' });
    expect(recordOf(parseParsedBody(Buffer.from('state=FAILED&amount=10'), 'form'))).toEqual({
      state: 'FAILED',
      amount: '10',
    });
  });

  it('decodes a Buffer in the given charset', () => {
    const raw = Buffer.from('{"state":"FAILED"}', 'utf16le');
    expect(recordOf(parseParsedBody(raw, 'json', 'utf-16le'))).toEqual({ state: 'FAILED' });
  });

  it.each([
    ['an array', [1]],
    ['null', null],
    ['a number', 42],
  ])('refuses %s as not_an_object', (_, body) => {
    expect(failureOf(parseParsedBody(body, 'json')).reason).toBe('not_an_object');
  });
});
