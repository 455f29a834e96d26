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
