import { parseContentType } from '../../../lib/body/content-type.js';

describe('parseContentType', () => {
  it.each([
    ['application/json', 'utf-8'],
    ['application/json; charset=utf-8', 'utf-8'],
    ['application/json; charset=UTF-8', 'utf-8'],
    ['application/json;charset="utf-8"', 'utf-8'],
    ['Application/JSON; Charset=utf8', 'utf8'],
    ['text/json', 'utf-8'],
    ['application/vnd.api+json', 'utf-8'],
    ['application/json; charset=utf-16le', 'utf-16le'],
  ])('reads %s as JSON in %s', (header, charset) => {
    expect(parseContentType(header)).toEqual({ ok: true, format: 'json', charset });
  });

  it.each([undefined, '', '  '])(
    'reads a missing header (%p) as UTF-8 JSON, what the service sends',
    (header) => {
      expect(parseContentType(header)).toEqual({ ok: true, format: 'json', charset: 'utf-8' });
    },
  );

  it.each(['application/x-www-form-urlencoded', 'application/x-www-form-urlencoded; charset=UTF-8'])(
    'reads %s as a UTF-8 form',
    (header) => {
      expect(parseContentType(header)).toEqual({ ok: true, format: 'form', charset: 'utf-8' });
    },
  );

  it.each([
    ['multipart/form-data; boundary=----x', 'multipart/form-data'],
    ['multipart/mixed', 'multipart/mixed'],
  ])('refuses %s, which cannot carry the record, naming the type and what to send', (header, type) => {
    const result = parseContentType(header);
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.message).toContain(type);
    expect(result.message).toContain('application/json');
  });

  it.each([
    'text/plain',
    'text/html; charset=utf-8',
    'application/octet-stream',
    'application/xml',
    'application/jsonp',
    'bogus',
  ])('reads %s as other: JSON when the body is a JSON object', (header) => {
    expect(parseContentType(header)).toEqual({ ok: true, format: 'other', charset: 'utf-8' });
  });

  it('refuses a body of another type in a charset Node cannot decode', () => {
    const result = parseContentType('text/plain; charset=foo-bar');
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.message).toContain('foo-bar');
  });

  it('refuses JSON in a charset Node cannot decode, naming the charset', () => {
    const result = parseContentType('application/json; charset=foo-bar');
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.message).toContain('foo-bar');
  });

  it('accepts a form declared as us-ascii, a subset of UTF-8', () => {
    expect(parseContentType('application/x-www-form-urlencoded; charset=us-ascii')).toEqual({
      ok: true,
      format: 'form',
      charset: 'us-ascii',
    });
  });

  it('refuses a form in a charset other than UTF-8, since percent-decoding is UTF-8', () => {
    const result = parseContentType('application/x-www-form-urlencoded; charset=iso-8859-1');
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.message).toContain('iso-8859-1');
  });

  it('answers a header read again, after others, as it answered it the first time', () => {
    const headers = ['application/json', 'multipart/form-data', undefined, 'text/plain; charset=latin1'];
    const first = headers.map((header) => parseContentType(header));
    for (const header of [...headers].reverse()) parseContentType(header);
    expect(headers.map((header) => parseContentType(header))).toEqual(first);
    expect(first[0]).toEqual({ ok: true, format: 'json', charset: 'utf-8' });
    expect(first[1]?.ok).toBe(false);
  });
});
