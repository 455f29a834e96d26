import type { Readable } from 'node:stream';
import { createBrotliDecompress, createGunzip, createInflate } from 'node:zlib';

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
 * bytes. Never rejects. On a failure the source is drained in the background, so the connection can carry
 * the answer and stay usable.
 */
export function readBody(source: Readable, limit: number, encoding?: string): Promise<ReadResult> {
  return new Promise((resolve) => {
    const decoder = DECODERS.get(encoding?.trim().toLowerCase() ?? '');
    const decoding = decoder?.();
    const input = (decoding ?? source) as Readable;
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;

    const finish = (result: ReadResult): void => {
      if (settled) return;
      settled = true;
      input.off('data', onData).off('end', onEnd);
      source.off('error', onSourceError).off('close', onClose);
      decoding?.off('error', onDecodeError);
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
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size > limit) {
        finish({ ok: false, reason: 'body_too_large', message: `the body is over the ${limit}-byte limit` });
      } else {
        chunks.push(chunk);
      }
    };
    const onEnd = (): void => {
      finish({ ok: true, body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size) });
    };
    const onSourceError = (error: Error): void => {
      finish({ ok: false, reason: 'request_aborted', message: `the request was aborted: ${error.message}` });
    };
    const onDecodeError = (error: Error): void => {
      finish({
        ok: false,
        reason: 'malformed_body',
        message: `the body could not be decompressed: ${error.message}`,
      });
    };
    // 'close' before 'end' means the client went away mid-body.
    const onClose = (): void => {
      if (!source.readableEnded)
        finish({ ok: false, reason: 'request_aborted', message: 'the request was aborted' });
    };

    input.on('data', onData).on('end', onEnd);
    source.on('error', onSourceError).on('close', onClose);
    if (decoding) {
      decoding.on('error', onDecodeError);
      source.pipe(decoding);
    }
  });
}
