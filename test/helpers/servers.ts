import type { Server } from 'node:http';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import express5 from 'express';
import express4 from 'express4';

/** The Express surface the tests use; both major versions provide it. */
export interface TestApp {
  use: (...handlers: unknown[]) => unknown;
  all: (...handlers: unknown[]) => unknown;
  post: (...handlers: unknown[]) => unknown;
  get: (...handlers: unknown[]) => unknown;
}

type ExpressModule = (() => TestApp) & {
  json: (options?: object) => unknown;
  urlencoded: (options?: object) => unknown;
  text: (options?: object) => unknown;
  raw: (options?: object) => unknown;
};

/** Every integration suite runs once per supported Express major version. */
export const EXPRESS_VERSIONS: Array<[string, ExpressModule]> = [
  ['Express 5', express5 as unknown as ExpressModule],
  ['Express 4', express4 as unknown as ExpressModule],
];

/** A server listening on loopback, its base URL, and a way to stop it. */
export interface Running {
  server: Server;
  url: string;
  close: () => Promise<void>;
}

/** Starts `app` on 127.0.0.1 on a free port. */
export async function listen(app: unknown): Promise<Running> {
  const server = createServer(app as Parameters<typeof createServer>[0]);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    server,
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Resolves after pending I/O callbacks and microtasks (e.g. a listener's rejected promise) have run. */
export function settle(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** POSTs `copies` copies of one JSON notification at once to `path`, alternating between `bases`; resolves the statuses. */
export function postCopies(
  bases: string[],
  payload: unknown,
  copies: number,
  path = '/ipn',
): Promise<number[]> {
  return Promise.all(
    Array.from({ length: copies }, (_, i) =>
      fetch(`${bases[i % bases.length] ?? ''}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(payload),
      }).then(async (response) => {
        await response.arrayBuffer();
        return response.status;
      }),
    ),
  );
}

/** A router (or any app with `close()`) served over HTTP, and `post(body)` to send it JSON. */
export interface Served<R> {
  ipn: R;
  url: string;
  post: (body: unknown) => Promise<Response>;
}

/**
 * For one test file: `serve(router)` listens on loopback and gives `post(body)`, a JSON POST to it; after
 * each test, every server it started is closed, then every router.
 */
export function servedRouters(): <R extends { close(): unknown }>(ipn: R) => Promise<Served<R>> {
  const servers: Running[] = [];
  const routers: Array<{ close(): unknown }> = [];
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((server) => server.close()));
    await Promise.all(routers.splice(0).map((router) => router.close()));
  });
  return async (ipn) => {
    routers.push(ipn);
    const running = await listen(ipn);
    servers.push(running);
    const post = (body: unknown) =>
      fetch(running.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    return { ipn, url: running.url, post };
  };
}

/**
 * POSTs `body` as JSON to `url`: the answer's status and JSON body, or `'no answer'` and why, when none came
 * within 10 s (far past a test's `storeTimeoutMs`: no answer by then is a hung request).
 */
export function answerWithin10s(url: string, body: unknown) {
  return fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  }).then(
    async (response) => ({ status: response.status, body: await response.json() }),
    (error: unknown) => ({ status: 'no answer', body: String(error) }),
  );
}
