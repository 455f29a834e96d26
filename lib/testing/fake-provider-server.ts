/// <reference types="node" preserve="true" />
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pause } from './fake-provider-delivery.js';
import type { StatusDesk } from './fake-provider-status.js';

/** The path of the status query, under the service's `api_v1` prefix. */
export const STATUS_PATH = '/api_v1/transaction/status';

const MAX_BODY = 1024 * 1024;

/** What the HTTP server of the fake provider needs. */
export interface StatusServerConfig {
  port: number;
  desk: StatusDesk;
  /** Milliseconds before each status answer. */
  statusDelayMs: number;
  /** Aborts pending (delayed) answers when the provider closes. */
  signal: AbortSignal;
  /** Registers a request's handling, so `close()` can wait for it. */
  track: (task: Promise<unknown>) => void;
}

/** A listening status server: its base URL, and how to stop it. */
export interface StatusServer {
  url: string;
  close(): Promise<void>;
}

/**
 * Listens on 127.0.0.1 and answers `POST /api_v1/transaction/status` through the status desk; any other
 * method or path is answered 404 `{ data: [], message: 'no route for ...', statut_code: 404 }`.
 */
export async function startStatusServer(config: StatusServerConfig): Promise<StatusServer> {
  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = new URL(req.url ?? '/', 'http://127.0.0.1').pathname;
    if (req.method !== 'POST' || path !== STATUS_PATH) {
      const message = `no route for ${req.method} ${path}: the status query is POST ${STATUS_PATH}`;
      return reply(res, 404, { data: [], message, statut_code: 404 });
    }
    const answer = config.desk.answer(await readText(req));
    if (!(await pause(config.statusDelayMs, config.signal))) return void res.destroy();
    reply(res, answer.status, answer.body);
  }

  const server = createServer((req, res) => config.track(handle(req, res).catch(() => void res.destroy())));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.port, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function reply(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}

async function readText(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    // Read to the end (so the answer can still be sent) but keep nothing: no real query is this large.
    if (size <= MAX_BODY) chunks.push(chunk as Buffer);
  }
  return size > MAX_BODY ? '' : Buffer.concat(chunks).toString('utf8');
}
