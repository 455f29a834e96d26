import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { finished } from 'node:stream/promises';
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import { isSupportedEncoding, readBody } from '../../../lib/body/read-body.js';
import type { ReadResult } from '../../../lib/body/read-body.js';

function bodyOf(result: ReadResult): Buffer {
  if (!result.ok) throw new Error(`expected the body to be read: ${result.reason}: ${result.message}`);
  return result.body;
}

function failureOf(result: ReadResult) {
  if (result.ok) throw new Error('expected the body to be refused');
  return result;
}

/** A source that has sent `chunks` and stays open, like a request whose client has not finished. */
function openSource(...chunks: Buffer[]): Readable {
  const source = new Readable({ read() {} });
  for (const chunk of chunks) source.push(chunk);
  return source;
}

const json = '{"transaction_id":"EFB.001158","state":"SUCCESSFUL","custom_data":"order-1001"}';

describe('readBody', () => {
  it('reads a stream to a Buffer', async () => {
    const body = bodyOf(await readBody(Readable.from([Buffer.from(json)]), 1024));
    expect(Buffer.isBuffer(body)).toBe(true);
    expect(body.toString()).toBe(json);
  });

  it('concatenates several chunks in order', async () => {
    const source = Readable.from([Buffer.from('{"a":'), Buffer.from('1,'), Buffer.from('"b":2}')]);
    expect(bodyOf(await readBody(source, 1024)).toString()).toBe('{"a":1,"b":2}');
  });

  it('reads an empty body as an empty Buffer', async () => {
    expect(bodyOf(await readBody(Readable.from([]), 1024))).toHaveLength(0);
  });

  it('accepts a body of exactly the limit', async () => {
    const source = Readable.from([Buffer.alloc(60, 'a'), Buffer.alloc(40, 'b')]);
    expect(bodyOf(await readBody(source, 100))).toHaveLength(100);
  });

  it('refuses a body one byte over the limit as body_too_large, naming the limit', async () => {
    const source = Readable.from([Buffer.alloc(60, 'a'), Buffer.alloc(41, 'b')]);
    const failure = failureOf(await readBody(source, 100));
    expect(failure.reason).toBe('body_too_large');
    expect(failure.message).toContain('100');
  });

  it('drains the rest of a body that is over the limit, so the connection stays usable', async () => {
    const chunks = Array.from({ length: 50 }, () => Buffer.alloc(100, 'x'));
    const source = Readable.from(chunks);
    const failure = failureOf(await readBody(source, 150));
    expect(failure.reason).toBe('body_too_large');
    // Nothing else reads the source: it only ends if readBody let it flow to its end.
    await finished(source);
    expect(source.readableEnded).toBe(true);
  });

  describe('compressed bodies', () => {
    it.each([
      ['gzip', gzipSync],
      ['x-gzip', gzipSync],
      ['deflate', deflateSync],
      ['br', brotliCompressSync],
    ])('decodes a %s body', async (encoding, compress) => {
      const source = Readable.from([compress(Buffer.from(json))]);
      expect(bodyOf(await readBody(source, 1024, encoding)).toString()).toBe(json);
    });

    it('reads the encoding name whatever its case and surrounding spaces', async () => {
      const source = Readable.from([gzipSync(Buffer.from(json))]);
      expect(bodyOf(await readBody(source, 1024, ' GZip ')).toString()).toBe(json);
    });

    it('decodes a compressed body split across chunks', async () => {
      const compressed = gzipSync(Buffer.from(json));
      const source = Readable.from([
        compressed.subarray(0, 7),
        compressed.subarray(7, 20),
        compressed.subarray(20),
      ]);
      expect(bodyOf(await readBody(source, 1024, 'gzip')).toString()).toBe(json);
    });

    it('applies the limit to the decoded bytes: a small gzip that inflates past it is body_too_large', async () => {
      const compressed = gzipSync(Buffer.alloc(100_000, '0'));
      expect(compressed.length).toBeLessThan(1000);
      const source = Readable.from([compressed]);
      expect(failureOf(await readBody(source, 1000, 'gzip')).reason).toBe('body_too_large');
    });

    it('accepts a compressed body whose decoded size is exactly the limit', async () => {
      const source = Readable.from([gzipSync(Buffer.alloc(5000, 'a'))]);
      expect(bodyOf(await readBody(source, 5000, 'gzip'))).toHaveLength(5000);
    });

    it('drains the source of a compressed body that inflates past the limit', async () => {
      // Random bytes do not compress: the source is still sending when the decoded bytes pass the limit.
      const compressed = gzipSync(randomBytes(1_000_000));
      const chunks = Array.from({ length: Math.ceil(compressed.length / 16_384) }, (_, i) =>
        compressed.subarray(i * 16_384, (i + 1) * 16_384),
      );
      const source = Readable.from(chunks);
      expect(failureOf(await readBody(source, 100, 'gzip')).reason).toBe('body_too_large');
      await finished(source);
      expect(source.readableEnded).toBe(true);
    });

    it.each(['gzip', 'deflate'])('refuses bytes that are not %s as malformed_body', async (encoding) => {
      const source = Readable.from([Buffer.from('this is not compressed at all')]);
      const failure = failureOf(await readBody(source, 1024, encoding));
      expect(failure.reason).toBe('malformed_body');
      expect(failure.message).toMatch(/decompress/);
    });

    it('refuses a truncated gzip body as malformed_body', async () => {
      const compressed = gzipSync(Buffer.from(json));
      const source = Readable.from([compressed.subarray(0, compressed.length - 10)]);
      expect(failureOf(await readBody(source, 1024, 'gzip')).reason).toBe('malformed_body');
    });
  });

  describe('aborted requests', () => {
    it('reports a source that errors mid-body as request_aborted, with the cause', async () => {
      async function* chunks() {
        yield Buffer.from('{"transaction_id":');
        await Promise.resolve();
        throw new Error('socket hang up');
      }
      const failure = failureOf(await readBody(Readable.from(chunks()), 1024));
      expect(failure.reason).toBe('request_aborted');
      expect(failure.message).toContain('socket hang up');
    });

    it('reports a source destroyed mid-body as request_aborted', async () => {
      const source = openSource(Buffer.from('{"transaction_id":'));
      const pending = readBody(source, 1024);
      source.destroy();
      expect(failureOf(await pending).reason).toBe('request_aborted');
    });

    it('reports a source destroyed mid-body with an error as request_aborted', async () => {
      const source = openSource(Buffer.from('{"transaction_id":'));
      const pending = readBody(source, 1024);
      source.destroy(new Error('aborted'));
      const failure = failureOf(await pending);
      expect(failure.reason).toBe('request_aborted');
      expect(failure.message).toContain('aborted');
    });

    it('reports a compressed source destroyed mid-body as request_aborted', async () => {
      const compressed = gzipSync(Buffer.from(json));
      const source = openSource(compressed.subarray(0, 10));
      const pending = readBody(source, 1024, 'gzip');
      source.destroy();
      expect(failureOf(await pending).reason).toBe('request_aborted');
    });
  });

  it.each(['constructor', '__proto__', ' Constructor '])(
    'never rejects for an encoding named like an Object.prototype member (%s)',
    async (encoding) => {
      const result = await readBody(Readable.from([Buffer.from(json)]), 1024, encoding);
      expect(typeof result.ok).toBe('boolean');
    },
  );
  describe('a source whose setEncoding() a host middleware called', () => {
    const text = '{"customer_name":"Aïssata Koné 🙂","state":"SUCCESSFUL"}';

    /** A source that yields strings, as a request does once `req.setEncoding(encoding)` was called. */
    function encoded(bytes: Buffer, encoding: BufferEncoding): Readable {
      const source = Readable.from([bytes.subarray(0, 7), bytes.subarray(7, 23), bytes.subarray(23)], {
        objectMode: false,
      });
      source.setEncoding(encoding);
      return source;
    }

    it.each(['utf8', 'latin1', 'hex', 'base64'] as const)(
      'reads string chunks (%s) back to the exact bytes, multi-byte characters included',
      async (encoding) => {
        const body = bodyOf(await readBody(encoded(Buffer.from(text), encoding), 1024));
        expect(Buffer.isBuffer(body)).toBe(true);
        expect(body.toString('utf8')).toBe(text);
      },
    );

    it('counts the limit in bytes, not in characters', async () => {
      const bytes = Buffer.byteLength(text);
      expect(bodyOf(await readBody(encoded(Buffer.from(text), 'utf8'), bytes))).toHaveLength(bytes);
      const failure = failureOf(await readBody(encoded(Buffer.from(text), 'utf8'), bytes - 1));
      expect(failure.reason).toBe('body_too_large');
    });

    it('decompresses a gzip body read as latin1 strings', async () => {
      const body = bodyOf(await readBody(encoded(gzipSync(text), 'latin1'), 1024, 'gzip'));
      expect(body.toString('utf8')).toBe(text);
    });

    it('refuses a gzip body already mangled by a UTF-8 decoding as malformed_body, without throwing', async () => {
      const failure = failureOf(await readBody(encoded(gzipSync(text), 'utf8'), 1024, 'gzip'));
      expect(failure.reason).toBe('malformed_body');
    });
  });

  it('rejects, instead of throwing from a stream callback, when a chunk is neither bytes nor text', async () => {
    const source = Readable.from([{ not: 'bytes' }, { nor: 'text' }], { objectMode: true });
    await expect(readBody(source, 1024)).rejects.toHaveProperty('message');
    // The rest of the source is drained, so the connection stays usable.
    await finished(source);
  });
});

describe('isSupportedEncoding', () => {
  it.each([undefined, '', 'identity', 'gzip', 'x-gzip', 'deflate', 'br', 'GZIP', ' br '])(
    'supports %p',
    (encoding) => {
      expect(isSupportedEncoding(encoding)).toBe(true);
    },
  );

  it.each(['compress', 'zstd', 'gzip, br', 'deflate-raw', 'constructor', '__proto__', ' Constructor '])(
    'does not support %p',
    (encoding) => {
      expect(isSupportedEncoding(encoding)).toBe(false);
    },
  );
});
