import type { Readable } from 'node:stream';
import { createBrotliDecompress, createGunzip, createInflate } from 'node:zlib';
import { messageOf } from '../shared/errors.js';

/** The bytes of a body, or why they could not be read. */
export type ReadResult =
  | { ok: true; body: Buffer }
  | { ok: false; reason: 'body_too_large' | 'malformed_body' | 'request_aborted'; message: string };

// A Map, not an object literal: `Content-Encoding: constructor` must not find Object.prototype's members.
const DECODERS = new Map<string, () => NodeJS.ReadWriteStream>([
  ['gzip', createGunzip],
  ['x-gzip', createGunzip],
  ['deflate', createInflate],
  ['br', createBrotliDecompress],
]);

/** Whether {@link readBody} can decode a `Content-Encoding` (absent, identity, gzip, deflate or br). */
export function isSupportedEncoding(encoding: string | undefined): boolean {
  const name = encoding?.trim().toLowerCase() ?? 'identity';
  return name === '' || name === 'identity' || DECODERS.has(name);
}

/**
 * Reads a body stream to its end, decompressing it when `encoding` says so, and stops at `limit` decoded
 * bytes. Bad input never rejects: it resolves why the body could not be read. On a failure the source is
 * drained in the background, so the connection can carry the answer and stay usable.
 *
 * A host middleware may have called `req.setEncoding()` (a raw-body capture does): the chunks are then
 * strings, turned back into bytes in that encoding. A UTF-8 decoding has already replaced the bytes that were
 * not UTF-8 (so a compressed body read that way cannot be decompressed: 400 `malformed_body`).
 * @returns rejects only on a bug of ours in a stream callback, which the router answers 500.
 */
export function readBody(source: Readable, limit: number, encoding?: string): Promise<ReadResult> {
  return new Promise((resolve, reject) => {
    const decoder = DECODERS.get(encoding?.trim().toLowerCase() ?? '');
    const decoding = decoder?.();
    const input = (decoding ?? source) as Readable;
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;

    // Each callback catches its own throw (`crash`): a throw inside a stream callback must not crash the
    // host. One closure per callback, and the decoder's only when there is one: every request reads a body.
    const cleanUp = (): void => {
      input.off('data', onData).off('end', onEnd);
      source.off('error', onSourceError).off('close', onClose);
      if (decoding) {
        decoding.off('error', onDecodeError!).off('drain', onDrain!);
        source.off('data', feed!).off('end', endFeed!);
      }
    };
    const finish = (result: ReadResult): void => {
      if (settled) return;
      settled = true;
      cleanUp();
      if (!result.ok) {
        if (decoding) {
          source.unpipe(decoding);
          (decoding as unknown as Readable).on('error', () => {}).destroy();
        }
        // Drain what is left, so the connection can carry the answer and stay usable.
        source.resume();
      }
      resolve(result);
    };
    /** A bug of ours in a callback: the read ends, rejected (the router answers 500). */
    const crash = (cause: unknown): void => {
      if (settled) return;
      settled = true;
      try {
        cleanUp();
        source.resume();
      } finally {
        reject(cause instanceof Error ? cause : new Error(messageOf(cause)));
      }
    };
    const onData = (chunk: Buffer | string): void => {
      try {
        const bytes = toBytes(chunk, input);
        size += bytes.length;
        if (size > limit) {
          finish({
            ok: false,
            reason: 'body_too_large',
            message: `the body is over the ${limit}-byte limit`,
          });
        } else {
          chunks.push(bytes);
        }
      } catch (cause) {
        crash(cause);
      }
    };
    const onEnd = (): void => {
      try {
        finish({ ok: true, body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size) });
      } catch (cause) {
        crash(cause);
      }
    };
    const onSourceError = (error: Error): void => {
      try {
        finish({
          ok: false,
          reason: 'request_aborted',
          message: `the request was aborted: ${messageOf(error)}`,
        });
      } catch (cause) {
        crash(cause);
      }
    };
    // 'close' before 'end' means the client went away mid-body.
    const onClose = (): void => {
      try {
        if (!source.readableEnded)
          finish({ ok: false, reason: 'request_aborted', message: 'the request was aborted' });
      } catch (cause) {
        crash(cause);
      }
    };
    const onDecodeError =
      decoding &&
      guarded(crash, (error: Error): void => {
        finish({
          ok: false,
          reason: 'malformed_body',
          message: `the body could not be decompressed: ${messageOf(error)}`,
        });
      });
    // A source that yields strings is fed to the decoder by hand: `pipe` would re-encode them as UTF-8.
    const feed =
      decoding &&
      guarded(crash, (chunk: Buffer | string): void => {
        if (decoding.write(toBytes(chunk, source)) === false) source.pause();
      });
    const endFeed = decoding && guarded(crash, (): void => void decoding.end());
    const onDrain = decoding && guarded(crash, (): void => void source.resume());

    input.on('data', onData).on('end', onEnd);
    source.on('error', onSourceError).on('close', onClose);
    if (decoding) {
      decoding.on('error', onDecodeError!);
      if (source.readableEncoding === null) source.pipe(decoding);
      else {
        decoding.on('drain', onDrain!);
        source.on('data', feed!).on('end', endFeed!);
      }
    }
  });
}

/** `callback`, whose throw goes to `crash` instead of the stream that called it. */
function guarded<A extends unknown[]>(crash: (cause: unknown) => void, callback: (...args: A) => void) {
  return (...args: A): void => {
    try {
      callback(...args);
    } catch (cause) {
      crash(cause);
    }
  };
}

/** A chunk as bytes: a stream whose `setEncoding()` was called yields strings in that encoding. */
function toBytes(chunk: Buffer | string, stream: Readable): Buffer {
  return typeof chunk === 'string' ? Buffer.from(chunk, stream.readableEncoding ?? 'utf8') : chunk;
}
