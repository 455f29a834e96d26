import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** How the stand-in answers: 200 as Slack does, 500, or never (it holds the request open). */
export type WebhookMode = 'ok' | 'fail' | 'hang';

/**
 * A local HTTP server standing in for a Slack (or Teams) incoming webhook: it records every JSON body
 * POSTed to it and answers as `mode` says (changeable while it runs).
 */
export async function webhookReceiver(mode: WebhookMode = 'ok') {
  const received: unknown[] = [];
  const held: ServerResponse[] = [];
  const state = { mode };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      received.push(JSON.parse(Buffer.concat(chunks).toString('utf8')));
      if (state.mode === 'hang') return void held.push(res);
      res.statusCode = state.mode === 'ok' ? 200 : 500;
      res.end(state.mode === 'ok' ? 'ok' : 'internal_error');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/services/T000/B000/secret`,
    received,
    state,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
