import type { IncomingMessage } from 'node:http';

/** The most a form of the page may weigh: a few short fields. */
const LIMIT = 8 * 1024;

/**
 * The request's urlencoded form: what a host parser left on `req.body`, or the stream read up to 8 KiB.
 * `undefined` when it is larger.
 */
export async function readForm(req: IncomingMessage): Promise<URLSearchParams | undefined> {
  const parsed = (req as { body?: unknown }).body;
  if (typeof parsed === 'object' && parsed !== null && !Buffer.isBuffer(parsed)) {
    const form = new URLSearchParams();
    for (const [name, value] of Object.entries(parsed)) if (typeof value === 'string') form.set(name, value);
    return form;
  }
  if (req.readableEnded) return new URLSearchParams();
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    const buffer = typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer);
    size += buffer.length;
    if (size > LIMIT) {
      req.resume();
      return undefined;
    }
    chunks.push(buffer);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

/** A WHATWG `Request`'s urlencoded form, read up to 8 KiB; `undefined` when it is larger. */
export async function readFetchForm(request: Request): Promise<URLSearchParams | undefined> {
  // Something read the body before the page (the host's own code): there is no form left to read.
  if (request.bodyUsed || request.body === null) return new URLSearchParams();
  const reader = (request.body as ReadableStream<Uint8Array>).getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > LIMIT) {
      reader.cancel().catch(() => undefined);
      return undefined;
    }
    chunks.push(value);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}
