import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createStatusClient, ipnRouter, type Logger } from '../../lib/index.js';
import type { StatusClientOptions } from '../../lib/status/status-client.js';
import { createFakeProvider } from '../../lib/testing.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen } from '../helpers/servers.js';
import { until } from '../helpers/until.js';

const API_KEY = 'key-5c1e8a7b2d';
const cleanup: Array<() => Promise<void>> = [];
afterEach(async () => {
  await Promise.all(cleanup.splice(0).map((close) => close()));
});

/** A status endpoint on loopback answering every request with `answer(id)`. */
async function service(answer: (res: ServerResponse, id: string) => void): Promise<string> {
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      let id = '';
      try {
        id = (JSON.parse(body) as { transaction_ids: string }).transaction_ids;
      } catch {
        // not our request
      }
      answer(res, id);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanup.push(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/api_v1/transaction`;
}

const notFound = (res: ServerResponse, id: string) =>
  res.end(JSON.stringify({ data: [id], message: 'transaction not found', statut_code: 404 }));
const client = (baseUrl: string, options: Partial<StatusClientOptions> = {}) =>
  createStatusClient({ baseUrl, apiKey: API_KEY, logger: quiet, retries: 0, ...options });

describe('client.check()', () => {
  test('a service answering "not found" for a made-up id: ok, the URL works, the key not proven', async () => {
    const check = await client(await service(notFound)).check();
    expect(check).toMatchObject({ ok: true, verdict: 'ok', keyConfirmed: false });
    expect(check.message).toContain('check({ transactionId })');
  });

  test('a transaction of yours that the service finds: ok, and the key confirmed', async () => {
    const record = uniquePayload();
    const url = await service((res) => res.end(JSON.stringify({ data: record, statut_code: 200 })));
    const check = await client(url).check({ transactionId: String(record.transaction_id) });
    expect(check).toMatchObject({ ok: true, verdict: 'ok', keyConfirmed: true });
  });

  test('a transaction of yours that the service does not find: the key is likely wrong', async () => {
    const check = await client(await service(notFound)).check({ transactionId: 'EFB.001158' });
    expect(check).toMatchObject({ ok: false, verdict: 'api_key', keyConfirmed: false });
    expect(check.message).toContain('apiKey');
  });

  test.each<[string, (res: ServerResponse) => void, string]>([
    ['HTTP 401', (res) => res.writeHead(401).end('{"message":"unauthorized"}'), 'api_key'],
    ['HTTP 403', (res) => res.writeHead(403).end(), 'api_key'],
    ['statut_code 401 in an HTTP 200', (res) => res.end('{"data":null,"statut_code":401}'), 'api_key'],
    [
      'a statut_code 400 saying the key is invalid',
      (res) => res.end('{"data":null,"statut_code":400,"message":"invalid api key"}'),
      'api_key',
    ],
    ['an HTML 404 page (wrong path)', (res) => res.writeHead(404).end('<html>Not Found</html>'), 'base_url'],
    ['an HTML 200 page (not the API)', (res) => res.end('<!doctype html><p>Welcome</p>'), 'base_url'],
    ['another JSON', (res) => res.end('{"hello":"world"}'), 'base_url'],
    ['a redirect', (res) => res.writeHead(301, { location: 'https://elsewhere.example/' }).end(), 'base_url'],
    ['HTTP 429', (res) => res.writeHead(429).end(), 'blocked'],
    ['HTTP 500', (res) => res.writeHead(500).end('oops'), 'service_error'],
  ])('%s: verdict %s', async (_, answer, verdict) => {
    const check = await client(await service(answer)).check();
    expect(check).toMatchObject({ ok: false, verdict, keyConfirmed: false });
    expect(check.error).toBeDefined();
    expect(JSON.stringify(check)).not.toContain(API_KEY);
  });

  test('nothing listening: unreachable', async () => {
    const url = await service(notFound);
    await Promise.all(cleanup.splice(0).map((close) => close()));
    const check = await client(url).check();
    expect(check).toMatchObject({ ok: false, verdict: 'unreachable' });
  });

  test('within the guard: with the budget spent, nothing is sent and it says so', async () => {
    let asked = 0;
    const url = await service((res, id) => {
      asked += 1;
      notFound(res, id);
    });
    const limited = client(url, { maxQueriesPerMinute: 1 });
    await limited.check();
    const check = await limited.check();
    expect(check).toMatchObject({ ok: false, verdict: 'rate_limited' });
    expect(asked).toBe(1);
  });
});

describe('a run of not-found answers warns once about the configuration', () => {
  /** A logger that keeps its warnings. */
  function warnings() {
    const lines: string[] = [];
    const logger: Logger = { ...quiet, warn: (_object, message) => void lines.push(message) };
    return { lines, logger };
  }

  test('five distinct ids in a row not found: one warning naming apiKey and baseUrl, not repeated', async () => {
    const { lines, logger } = warnings();
    const api = client(await service(notFound), { logger });
    for (let i = 0; i < 4; i += 1) await api.getStatus(`EFB.10000${i}`).catch(() => {});
    expect(lines).toHaveLength(0);
    await api.getStatus('EFB.100004').catch(() => {});
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/apiKey.*baseUrl/);
    for (let i = 5; i < 15; i += 1) await api.getStatus(`EFB.10000${i}`).catch(() => {});
    expect(lines).toHaveLength(1); // at most one an hour
  });

  test('a record found in between resets the run; check() ids do not count', async () => {
    const { lines, logger } = warnings();
    const found = uniquePayload();
    const url = await service((res, id) =>
      id === found.transaction_id ? res.end(JSON.stringify({ data: found })) : notFound(res, id),
    );
    const api = client(url, { logger });
    for (let i = 0; i < 4; i += 1) await api.getStatus(`EFB.20000${i}`).catch(() => {});
    await api.getStatus(String(found.transaction_id));
    for (let i = 4; i < 8; i += 1) await api.getStatus(`EFB.20000${i}`).catch(() => {});
    for (let i = 0; i < 3; i += 1) await api.check();
    expect(lines).toHaveLength(0);
  });

  test('with verify and a wrong apiKey, genuine payments rejected as not_found come with one warning', async () => {
    const provider = await createFakeProvider({ apiKey: 'the-right-key', resendIntervalMs: 10 });
    cleanup.push(() => provider.close());
    const { lines, logger } = warnings();
    const verify = createStatusClient({
      baseUrl: provider.statusBaseUrl,
      apiKey: 'the-wrong-key',
      logger,
      minIntervalMs: 20,
    });
    const ipn = ipnRouter({ verify, logger: quiet, verifyRetryDelayMs: 5 });
    const recorder = recordEvents(ipn);
    const running = await listen(ipn);
    cleanup.push(
      () => running.close(),
      () => ipn.close(),
    );
    for (let i = 0; i < 5; i += 1) {
      provider.initiate({
        amount: 100 + i,
        ipnUrl: `${running.url}/`,
        customData: `order-${i}`,
        outcome: 'SUCCESSFUL',
      });
    }
    await until(() => recorder.count('rejected') === 5, 'the five rejections', 10_000);
    for (const event of recorder.of('rejected')) {
      expect(event.reason).toBe('not_found');
      expect(event.message).toContain('apiKey or baseUrl');
    }
    expect(lines.filter((line) => line.includes('apiKey'))).toHaveLength(1);
  });
});
