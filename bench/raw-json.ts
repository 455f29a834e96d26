import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';

/**
 * The reference for `node-http` (issue 27): what a partner writes on `node:http` alone. It reads the body,
 * parses it and answers 200, nothing more: no validation, no dedupe. `parsed` is called for each body that
 * parsed (the server's counter). Shared by bench/server.ts and bench/stages.ts, so both measure one server.
 */
export function rawJson(parsed: () => void = () => {}): RequestListener {
  return (req: IncomingMessage, res: ServerResponse): void => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      try {
        JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        res.writeHead(400).end();
        return;
      }
      parsed();
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
    });
  };
}
