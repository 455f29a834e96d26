/**
 * The app a flood of forged notifications is sent to (test/integration/verify-flood.test.ts), in a process
 * of its own so that its heap is measured alone and the flood's sender runs beside it. Run with
 * `node --expose-gc --import tsx`; configured by FLOOD (JSON: the genuine notification, the status service's
 * delay); talks to the test over IPC: sends { type: 'ready', port }; answers 'heap' with
 * { type: 'heap', heapUsed } (after a full collection) and 'counts' with { type: 'counts', counts, shed }.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createStatusClient, ipnRouter } from '../../lib/index.js';

const { genuine, serviceDelayMs, defaults } = JSON.parse(process.env.FLOOD ?? '{}') as {
  genuine: Record<string, unknown>;
  serviceDelayMs: number;
  /** Every option at its default (bench/verify-flood.ts): the budget of 30 queries a minute included. */
  defaults?: boolean;
};
const gc = (globalThis as { gc?: () => void }).gc ?? (() => {});
const send = (message: unknown) => process.send?.(message);
const quiet = { debug() {}, info() {}, warn() {}, error() {} };

/** A status service that knows only the genuine notification, and answers every query after a delay. */
const service = createServer((req, res) => {
  let body = '';
  req.on('data', (chunk: Buffer) => (body += chunk.toString()));
  req.on('end', () => {
    const id = (JSON.parse(body) as { transaction_ids: string }).transaction_ids;
    const answer =
      id === genuine.transaction_id
        ? { data: genuine, message: '', statut_code: 200 }
        : { data: [id], message: 'transaction not found', statut_code: 404 };
    const timer = setTimeout(() => res.end(JSON.stringify(answer)), serviceDelayMs);
    res.on('close', () => clearTimeout(timer));
  });
});

service.listen(0, '127.0.0.1', () => {
  const servicePort = (service.address() as AddressInfo).port;
  // A budget that lets the forged ids be asked about (twice each: a not-found must be repeated), so the
  // queue drains within seconds once the flood stops; maxPendingVerifications and limit are the defaults.
  const client = createStatusClient({
    baseUrl: `http://127.0.0.1:${servicePort}/api_v1/transaction`,
    apiKey: 'flood-key',
    logger: quiet,
    ...(defaults ? {} : { maxQueriesPerMinute: 1_000_000, minIntervalMs: 100 }),
  });
  const ipn = ipnRouter({ verify: client, logger: quiet, ...(defaults ? {} : { verifyRetryDelayMs: 100 }) });
  const counts = { successful: 0, rejected: 0, errors: 0, shed: 0 };
  ipn.on('successful', () => void (counts.successful += 1));
  ipn.on('rejected', () => void (counts.rejected += 1));
  ipn.on('error', ({ error }) => {
    if (error.code === 'IPN_VERIFY_BUSY') counts.shed += 1;
    else counts.errors += 1;
  });
  const app = createServer(ipn);
  app.listen(0, '127.0.0.1', () => send({ type: 'ready', port: (app.address() as AddressInfo).port }));
  process.on('message', (message) => {
    if (message === 'heap') {
      gc();
      gc();
      send({ type: 'heap', heapUsed: process.memoryUsage().heapUsed });
    } else if (message === 'counts') {
      send({ type: 'counts', counts, shed: ipn.metrics().verificationsShed });
    }
  });
});
