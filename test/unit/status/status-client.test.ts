import { setTimeout as sleep } from 'node:timers/promises';
import {
  StatusQueryError,
  StatusRateLimitError,
  TransactionNotFoundError,
} from '../../../lib/shared/errors.js';
import type { Logger } from '../../../lib/observability/logger.js';
import { createStatusClient } from '../../../lib/status/status-client.js';
import type { StatusClientOptions } from '../../../lib/status/status-client.js';
import { successfulPayload } from '../../helpers/payloads.js';

const BASE = 'https://api.example.com/api_v1/transaction';
const API_KEY = 'key-0123456789';
const ID = 'EFB.001158';

type Fetch = typeof fetch;

const quiet: Logger = { debug: () => {}, info: () => {}, warn: () => {}, error: () => {} };

/** A fake fetch; each call runs `answer`, which must build a new Response (a body is read once). */
function fakeFetch(answer: (init: RequestInit | undefined) => Promise<Response>) {
  return jest.fn<ReturnType<Fetch>, Parameters<Fetch>>((_input, init) => answer(init));
}

/** The JSON body the client sent (always a string). */
function sentBody(init: RequestInit | undefined): unknown {
  return JSON.parse(init?.body as string);
}

/** The status envelope holding `record`, as the service answers it. */
function envelope(record: Record<string, unknown>, statutCode: number = 200, message = '') {
  return { data: record, message, statut_code: statutCode };
}

function record(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return successfulPayload(overrides);
}

function reply(body: unknown, status = 200, headers: Record<string, string> = {}): Response {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  return new Response(text, { status, headers: { 'content-type': 'application/json', ...headers } });
}

/** Answers each id with a SUCCESSFUL record of that id. */
function successfulService() {
  return fakeFetch((init) => {
    const { transaction_ids } = sentBody(init) as { transaction_ids: string };
    return Promise.resolve(reply(envelope(record({ transaction_id: transaction_ids }))));
  });
}

/** Answers with `responses` in turn, then repeats the last one. */
function answersInTurn(...responses: (() => Response)[]) {
  let call = 0;
  return fakeFetch(() => {
    const next = responses[Math.min(call, responses.length - 1)] as () => Response;
    call += 1;
    return Promise.resolve(next());
  });
}

/** A fetch that honours its AbortSignal and otherwise never answers. */
function hangingService() {
  return fakeFetch(
    (init) =>
      new Promise<Response>((_resolve, reject) => {
        const signal = init?.signal;
        signal?.addEventListener('abort', () => reject(new Error('aborted', { cause: signal.reason })));
      }),
  );
}

function deferred<T>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((settle) => {
    resolve = settle;
  });
  return { promise, resolve };
}

function client(fetch: Fetch, options: Partial<StatusClientOptions> = {}) {
  return createStatusClient({
    baseUrl: BASE,
    apiKey: API_KEY,
    fetch,
    logger: quiet,
    retryDelayMs: 1,
    ...options,
  });
}

/** The rejection of `promise`, which must reject. */
async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected the promise to reject');
}

describe('createStatusClient', () => {
  describe('the request', () => {
    it('POSTs the JSON body { api_key, transaction_ids } to baseUrl/status', async () => {
      const fetch = successfulService();
      const status = await client(fetch).getStatus(ID);
      expect(status.transaction_id).toBe(ID);
      expect(status.state).toBe('SUCCESSFUL');
      expect(fetch).toHaveBeenCalledTimes(1);
      const [url, init] = fetch.mock.calls[0] as Parameters<Fetch>;
      expect(url).toBe(`${BASE}/status`);
      expect(init?.method).toBe('POST');
      expect(new Headers(init?.headers).get('content-type')).toBe('application/json');
      expect(sentBody(init)).toEqual({ api_key: API_KEY, transaction_ids: ID });
    });

    it('removes the trailing slashes of baseUrl', async () => {
      const fetch = successfulService();
      await client(fetch, { baseUrl: `${BASE}//` }).getStatus(ID);
      expect(fetch.mock.calls[0]?.[0]).toBe(`${BASE}/status`);
    });

    it('answers the record read leniently: comission as commission, numbers from strings', async () => {
      const fetch = answersInTurn(() => reply(envelope(record({ fee: '0', amount: '5000' }))));
      const status = await client(fetch).getStatus(ID);
      expect(status).toMatchObject({
        amount: 5000,
        fee: 0,
        commission: 75,
        custom_data: '{"orderId":"order-1001"}',
      });
    });

    it('never sends anything by itself', async () => {
      const fetch = successfulService();
      const created = client(fetch, { minIntervalMs: 1, blockCooldownMs: 1, timeoutMs: 1 });
      await sleep(50);
      expect(fetch).not.toHaveBeenCalled();
      expect(created.stats).toEqual({ queries: 0, refused: 0, cached: 0, shared: 0, budgetLeft: 30 });
    });

    it('rejects getStatus("") with a TypeError and sends nothing', async () => {
      const fetch = successfulService();
      const error = await rejectionOf(client(fetch).getStatus(''));
      expect(error).toBeInstanceOf(TypeError);
      expect((error as TypeError).message).toMatch(/^getStatus: /);
      expect(fetch).not.toHaveBeenCalled();
    });
  });

  describe('sparing the service', () => {
    it('shares one request among 10 concurrent calls for one id', async () => {
      const gate = deferred<Response>();
      const fetch = fakeFetch(() => gate.promise);
      const statusClient = client(fetch);
      const calls = Array.from({ length: 10 }, () => statusClient.getStatus(ID));
      gate.resolve(reply(envelope(record())));
      const records = await Promise.all(calls);
      expect(fetch).toHaveBeenCalledTimes(1);
      expect(records.map((status) => status.state)).toEqual(Array(10).fill('SUCCESSFUL'));
      expect(statusClient.stats).toEqual({ queries: 1, refused: 0, cached: 0, shared: 9, budgetLeft: 29 });
    });

    it('shares a failure among concurrent calls too', async () => {
      const gate = deferred<Response>();
      const fetch = fakeFetch(() => gate.promise);
      const statusClient = client(fetch);
      const calls = Array.from({ length: 3 }, () => rejectionOf(statusClient.getStatus(ID)));
      gate.resolve(reply(envelope(record(), 404, 'transaction not found')));
      const errors = await Promise.all(calls);
      expect(errors.every((error) => error instanceof TransactionNotFoundError)).toBe(true);
      expect(fetch).toHaveBeenCalledTimes(1);
      expect(statusClient.stats.shared).toBe(2);
    });

    it('answers a final state from the cache the second time', async () => {
      const fetch = successfulService();
      const statusClient = client(fetch);
      const first = await statusClient.getStatus(ID);
      const second = await statusClient.getStatus(ID);
      expect(second).toEqual(first);
      expect(fetch).toHaveBeenCalledTimes(1);
      expect(statusClient.stats).toMatchObject({ queries: 1, cached: 1 });
    });

    it('caches FAILED as final too', async () => {
      const fetch = answersInTurn(() => reply(envelope(record({ state: 'FAILED' }))));
      const statusClient = client(fetch, { minIntervalMs: 0 });
      await statusClient.getStatus(ID);
      expect((await statusClient.getStatus(ID)).state).toBe('FAILED');
      expect(fetch).toHaveBeenCalledTimes(1);
    });

    it('reuses a non-final answer within minIntervalMs', async () => {
      const fetch = answersInTurn(
        () => reply(envelope({ transaction_id: ID, state: 'PENDING1', amount: 5000 })),
        () => reply(envelope(record())),
      );
      const statusClient = client(fetch, { minIntervalMs: 60_000 });
      expect((await statusClient.getStatus(ID)).state).toBe('PENDING1');
      expect((await statusClient.getStatus(ID)).state).toBe('PENDING1');
      expect(fetch).toHaveBeenCalledTimes(1);
      expect(statusClient.stats).toMatchObject({ queries: 1, cached: 1 });
    });

    it('asks again about a non-final id after minIntervalMs', async () => {
      const fetch = answersInTurn(
        () => reply(envelope({ transaction_id: ID, state: 'PENDING1', amount: 5000 })),
        () => reply(envelope(record())),
      );
      const statusClient = client(fetch, { minIntervalMs: 30 });
      expect((await statusClient.getStatus(ID)).state).toBe('PENDING1');
      await sleep(80);
      expect((await statusClient.getStatus(ID)).state).toBe('SUCCESSFUL');
      expect(fetch).toHaveBeenCalledTimes(2);
      expect(statusClient.stats).toMatchObject({ queries: 2, cached: 0 });
    });

    it('reuses a not-found answer within minIntervalMs: a forger repeating an unknown id costs one query', async () => {
      const fetch = answersInTurn(() =>
        reply({ data: [ID], message: 'transaction not found', statut_code: 404 }),
      );
      const statusClient = client(fetch, { minIntervalMs: 60_000 });
      for (let attempt = 0; attempt < 5; attempt += 1) {
        const error = await rejectionOf(statusClient.getStatus(ID));
        expect(error).toBeInstanceOf(TransactionNotFoundError);
        expect((error as TransactionNotFoundError).transactionId).toBe(ID);
      }
      expect(fetch).toHaveBeenCalledTimes(1);
      expect(statusClient.stats).toMatchObject({ queries: 1, cached: 4 });
    });

    it('asks again about a not-found id after minIntervalMs', async () => {
      const fetch = answersInTurn(
        () => reply({ data: [ID], message: 'transaction not found', statut_code: 404 }),
        () => reply(envelope(record())),
      );
      const statusClient = client(fetch, { minIntervalMs: 30 });
      expect(await rejectionOf(statusClient.getStatus(ID))).toBeInstanceOf(TransactionNotFoundError);
      await sleep(80);
      expect((await statusClient.getStatus(ID)).state).toBe('SUCCESSFUL');
      expect(fetch).toHaveBeenCalledTimes(2);
    });

    it('refuses the 4th distinct id at once when maxQueriesPerMinute is 3', async () => {
      const fetch = successfulService();
      const statusClient = client(fetch, { maxQueriesPerMinute: 3 });
      for (const id of ['EFB.000001', 'EFB.000002', 'EFB.000003']) await statusClient.getStatus(id);
      const error = await rejectionOf(statusClient.getStatus('EFB.000004'));
      expect(error).toBeInstanceOf(StatusRateLimitError);
      const refusal = error as StatusRateLimitError;
      expect(refusal.reason).toBe('budget');
      expect(refusal.code).toBe('IPN_STATUS_RATE_LIMITED');
      expect(refusal.transactionId).toBe('EFB.000004');
      expect(refusal.retryAfterMs).toBeGreaterThan(0);
      expect(refusal.retryAfterMs).toBeLessThanOrEqual(60_000);
      expect(fetch).toHaveBeenCalledTimes(3);
      expect(statusClient.stats).toMatchObject({ queries: 3, refused: 1 });
    });

    it('forgets the oldest cached id beyond cacheSize', async () => {
      const fetch = successfulService();
      const statusClient = client(fetch, { cacheSize: 1 });
      await statusClient.getStatus('EFB.000001');
      await statusClient.getStatus('EFB.000002');
      await statusClient.getStatus('EFB.000002');
      expect(fetch).toHaveBeenCalledTimes(2);
      await statusClient.getStatus('EFB.000001');
      expect(fetch).toHaveBeenCalledTimes(3);
    });

    it('still answers cached ids once the budget is spent', async () => {
      const fetch = successfulService();
      const statusClient = client(fetch, { maxQueriesPerMinute: 1 });
      await statusClient.getStatus(ID);
      expect(await rejectionOf(statusClient.getStatus('EFB.000002'))).toBeInstanceOf(StatusRateLimitError);
      expect((await statusClient.getStatus(ID)).transaction_id).toBe(ID);
      expect(fetch).toHaveBeenCalledTimes(1);
    });
  });

  describe('since: an answer newer than a time', () => {
    it('answers from the cache when the cached answer is newer than since', async () => {
      const fetch = successfulService();
      const api = client(fetch);
      const before = Date.now() - 1_000;
      await api.getStatus(ID);
      await expect(api.getStatus(ID, { since: before })).resolves.toMatchObject({ state: 'SUCCESSFUL' });
      expect(fetch).toHaveBeenCalledTimes(1);
    });

    it('refuses with reason interval when the cached answer is older than since and the id was just asked', async () => {
      const fetch = successfulService();
      const api = client(fetch, { minIntervalMs: 60_000 });
      await api.getStatus(ID);
      const error = await rejectionOf(
        api.getStatus(ID, { since: performance.timeOrigin + performance.now() }),
      );
      expect(error).toBeInstanceOf(StatusRateLimitError);
      expect(error).toMatchObject({ reason: 'interval' });
      expect((error as StatusRateLimitError).retryAfterMs).toBeGreaterThan(50_000);
      expect(fetch).toHaveBeenCalledTimes(1);
      expect(api.stats.refused).toBe(1);
    });

    it('asks again, even over a cached final answer, once minIntervalMs has passed', async () => {
      const fetch = answersInTurn(
        () => reply(envelope(record({ transaction_id: ID, state: 'FAILED' }))),
        () => reply(envelope(record({ transaction_id: ID, state: 'SUCCESSFUL' }))),
      );
      // An interval no pause of a loaded machine between two calls reaches: the third call must be cached.
      const api = client(fetch, { minIntervalMs: 1_000 });
      expect((await api.getStatus(ID)).state).toBe('FAILED');
      const since = performance.timeOrigin + performance.now();
      await sleep(1_100);
      expect((await api.getStatus(ID, { since })).state).toBe('SUCCESSFUL');
      expect((await api.getStatus(ID)).state).toBe('SUCCESSFUL'); // the newer answer is the cached one
      expect(fetch).toHaveBeenCalledTimes(2);
    });

    it('does not cache a final answer that lacks the amount for good: asked again after minIntervalMs', async () => {
      const fetch = fakeFetch(() =>
        Promise.resolve(reply({ data: { transaction_id: ID, state: 'SUCCESSFUL', custom_data: 'o' } })),
      );
      // An interval no pause of a loaded machine between the first two calls reaches (10 ms did, once).
      const api = client(fetch, { minIntervalMs: 1_000 });
      await api.getStatus(ID);
      await api.getStatus(ID);
      expect(fetch).toHaveBeenCalledTimes(1);
      await sleep(1_100);
      await api.getStatus(ID);
      expect(fetch).toHaveBeenCalledTimes(2);
    });
  });

  describe('a block', () => {
    it('takes statut_code 429 in an HTTP 200 body for a block too: nothing more is sent during the cool-down', async () => {
      const fetch = answersInTurn(
        () => reply(JSON.stringify({ data: [], message: 'too many requests', statut_code: 429 })),
        () => reply(envelope(record())),
      );
      const statusClient = client(fetch, { blockCooldownMs: 60_000 });
      const error = await rejectionOf(statusClient.getStatus(ID));
      expect(error).toMatchObject({ code: 'IPN_STATUS_QUERY_FAILED', statutCode: 429, blocked: true });
      const refusal = await rejectionOf(statusClient.getStatus('EFB.000002'));
      expect(refusal).toMatchObject({ code: 'IPN_STATUS_RATE_LIMITED', reason: 'blocked' });
      expect(fetch).toHaveBeenCalledTimes(1);
    });

    it.each([[429], [403]])(
      'after HTTP %i, rejects that call and refuses other ids without fetching during the cool-down',
      async (status) => {
        const fetch = answersInTurn(
          () => reply('Too Many Requests', status),
          () => reply(envelope(record())),
        );
        const statusClient = client(fetch, { blockCooldownMs: 60_000, retries: 2 });
        const error = await rejectionOf(statusClient.getStatus(ID));
        expect(error).toBeInstanceOf(StatusQueryError);
        expect((error as StatusQueryError).httpStatus).toBe(status);
        expect((error as StatusQueryError).retryable).toBe(true);
        expect(fetch).toHaveBeenCalledTimes(1);

        for (const id of ['EFB.000002', 'EFB.000003', ID]) {
          const refusal = await rejectionOf(statusClient.getStatus(id));
          expect(refusal).toBeInstanceOf(StatusRateLimitError);
          expect((refusal as StatusRateLimitError).reason).toBe('blocked');
          expect((refusal as StatusRateLimitError).retryAfterMs).toBeGreaterThan(0);
          expect((refusal as StatusRateLimitError).retryAfterMs).toBeLessThanOrEqual(60_000);
        }
        expect(fetch).toHaveBeenCalledTimes(1);
        expect(statusClient.stats).toMatchObject({ queries: 1, refused: 3 });
      },
    );

    it('extends the cool-down to a longer Retry-After given in seconds', async () => {
      const fetch = answersInTurn(() => reply('slow down', 429, { 'retry-after': '120' }));
      const statusClient = client(fetch, { blockCooldownMs: 1_000 });
      expect(await rejectionOf(statusClient.getStatus(ID))).toBeInstanceOf(StatusQueryError);
      const refusal = (await rejectionOf(statusClient.getStatus('EFB.000002'))) as StatusRateLimitError;
      expect(refusal).toBeInstanceOf(StatusRateLimitError);
      expect(refusal.reason).toBe('blocked');
      expect(refusal.retryAfterMs).toBeGreaterThan(1_000);
      expect(refusal.retryAfterMs).toBeLessThanOrEqual(120_000);
      expect(fetch).toHaveBeenCalledTimes(1);
    });

    it('obeys a Retry-After of a month for one day at most', async () => {
      const fetch = answersInTurn(() => reply('slow down', 429, { 'retry-after': String(30 * 24 * 3600) }));
      const statusClient = client(fetch, { blockCooldownMs: 1_000 });
      await rejectionOf(statusClient.getStatus(ID));
      const refusal = (await rejectionOf(statusClient.getStatus('EFB.000002'))) as StatusRateLimitError;
      expect(refusal.retryAfterMs).toBeGreaterThan(23 * 3600 * 1000);
      expect(refusal.retryAfterMs).toBeLessThanOrEqual(24 * 3600 * 1000);
    });

    it('extends the cool-down to a longer Retry-After given as an HTTP date', async () => {
      const later = new Date(Date.now() + 120_000).toUTCString();
      const fetch = answersInTurn(() => reply('slow down', 429, { 'retry-after': later }));
      const statusClient = client(fetch, { blockCooldownMs: 1_000 });
      await rejectionOf(statusClient.getStatus(ID));
      const refusal = (await rejectionOf(statusClient.getStatus('EFB.000002'))) as StatusRateLimitError;
      expect(refusal.reason).toBe('blocked');
      expect(refusal.retryAfterMs).toBeGreaterThan(1_000);
      expect(refusal.retryAfterMs).toBeLessThanOrEqual(120_000);
    });

    it('keeps blockCooldownMs when Retry-After is shorter', async () => {
      const fetch = answersInTurn(() => reply('slow down', 429, { 'retry-after': '1' }));
      const statusClient = client(fetch, { blockCooldownMs: 60_000 });
      await rejectionOf(statusClient.getStatus(ID));
      const refusal = (await rejectionOf(statusClient.getStatus('EFB.000002'))) as StatusRateLimitError;
      expect(refusal.retryAfterMs).toBeGreaterThan(1_000);
      expect(fetch).toHaveBeenCalledTimes(1);
    });

    it('sends again once a short blockCooldownMs has elapsed', async () => {
      const fetch = answersInTurn(
        () => reply('Too Many Requests', 429),
        () => reply(envelope(record({ transaction_id: 'EFB.000002' }))),
      );
      const statusClient = client(fetch, { blockCooldownMs: 30 });
      expect(await rejectionOf(statusClient.getStatus(ID))).toBeInstanceOf(StatusQueryError);
      await sleep(80);
      expect((await statusClient.getStatus('EFB.000002')).state).toBe('SUCCESSFUL');
      expect(fetch).toHaveBeenCalledTimes(2);
    });
  });

  describe('timeouts and retries', () => {
    it('rejects a retryable StatusQueryError without httpStatus after timeoutMs, retried `retries` times', async () => {
      const fetch = hangingService();
      const error = await rejectionOf(client(fetch, { timeoutMs: 20, retries: 2 }).getStatus(ID));
      expect(error).toBeInstanceOf(StatusQueryError);
      const failure = error as StatusQueryError;
      expect(failure.retryable).toBe(true);
      expect(failure.httpStatus).toBeUndefined();
      expect(failure.transactionId).toBe(ID);
      expect(failure.message).toContain('got no answer');
      expect(fetch).toHaveBeenCalledTimes(3);
    });

    it('gives each attempt an AbortSignal', async () => {
      const fetch = hangingService();
      await rejectionOf(client(fetch, { timeoutMs: 10, retries: 0 }).getStatus(ID));
      expect(fetch).toHaveBeenCalledTimes(1);
      expect(fetch.mock.calls[0]?.[1]?.signal?.aborted).toBe(true);
    });

    it('retries a network error', async () => {
      let call = 0;
      const fetch = fakeFetch(() => {
        call += 1;
        return call === 1
          ? Promise.reject(new TypeError('fetch failed'))
          : Promise.resolve(reply(envelope(record())));
      });
      expect((await client(fetch, { retries: 1 }).getStatus(ID)).state).toBe('SUCCESSFUL');
      expect(fetch).toHaveBeenCalledTimes(2);
    });

    it('retries after HTTP 500 and resolves with the next answer', async () => {
      const fetch = answersInTurn(
        () => reply('<html>500 Internal Server Error</html>', 500),
        () => reply(envelope(record())),
      );
      const statusClient = client(fetch, { retries: 2 });
      expect((await statusClient.getStatus(ID)).state).toBe('SUCCESSFUL');
      expect(fetch).toHaveBeenCalledTimes(2);
      expect(statusClient.stats.queries).toBe(2);
    });

    it('retries after statut_code 500 in an HTTP 200 answer', async () => {
      const fetch = answersInTurn(
        () => reply({ data: null, message: 'internal error', statut_code: 500 }),
        () => reply(envelope(record())),
      );
      expect((await client(fetch, { retries: 1 }).getStatus(ID)).state).toBe('SUCCESSFUL');
      expect(fetch).toHaveBeenCalledTimes(2);
    });

    it('rejects the last StatusQueryError once every retry answered 500', async () => {
      const fetch = answersInTurn(() => reply({ data: null, message: 'down', statut_code: 500 }, 500));
      const error = await rejectionOf(client(fetch, { retries: 2 }).getStatus(ID));
      expect(error).toBeInstanceOf(StatusQueryError);
      expect((error as StatusQueryError).httpStatus).toBe(500);
      expect(fetch).toHaveBeenCalledTimes(3);
    });

    it('does not retry after HTTP 400', async () => {
      const fetch = answersInTurn(
        () => reply({ data: null, message: 'bad request', statut_code: 400 }, 400),
        () => reply(envelope(record())),
      );
      const error = await rejectionOf(client(fetch, { retries: 2 }).getStatus(ID));
      expect(error).toBeInstanceOf(StatusQueryError);
      expect((error as StatusQueryError).retryable).toBe(false);
      expect((error as StatusQueryError).httpStatus).toBe(400);
      expect(fetch).toHaveBeenCalledTimes(1);
    });

    it('does not retry after statut_code 404', async () => {
      const fetch = answersInTurn(
        () => reply({ data: [ID], message: 'transaction not found', statut_code: 404 }),
        () => reply(envelope(record())),
      );
      const error = await rejectionOf(client(fetch, { retries: 2 }).getStatus(ID));
      expect(error).toBeInstanceOf(TransactionNotFoundError);
      expect(fetch).toHaveBeenCalledTimes(1);
    });

    it('counts retries against the budget', async () => {
      const fetch = answersInTurn(() => reply({ data: null, message: 'down', statut_code: 500 }, 500));
      const statusClient = client(fetch, { maxQueriesPerMinute: 2, retries: 5 });
      const error = await rejectionOf(statusClient.getStatus(ID));
      expect(error).toBeInstanceOf(StatusRateLimitError);
      expect((error as StatusRateLimitError).reason).toBe('budget');
      expect(fetch).toHaveBeenCalledTimes(2);
      expect(statusClient.stats).toMatchObject({ queries: 2, refused: 1 });
    });
  });

  describe('options', () => {
    /** Passes options that the types forbid, as a JavaScript caller could. */
    function createUntyped(options: Record<string, unknown>) {
      return createStatusClient(options as unknown as StatusClientOptions);
    }

    function constructionError(options: Record<string, unknown>): TypeError {
      try {
        createUntyped({ baseUrl: BASE, apiKey: API_KEY, ...options });
      } catch (error) {
        if (error instanceof TypeError) return error;
        throw error;
      }
      throw new Error('expected createStatusClient to throw');
    }

    it.each<[string, Record<string, unknown>, RegExp]>([
      ['baseUrl missing', { baseUrl: undefined }, /baseUrl/],
      ['baseUrl empty', { baseUrl: '' }, /baseUrl/],
      ['baseUrl without a scheme', { baseUrl: 'api.example.com/api_v1/transaction' }, /baseUrl/],
      ['baseUrl relative', { baseUrl: '/api_v1/transaction' }, /baseUrl/],
      ['baseUrl ftp', { baseUrl: 'ftp://api.example.com/api_v1/transaction' }, /baseUrl/],
      ['baseUrl not a string', { baseUrl: 42 }, /baseUrl/],
      ['apiKey missing', { apiKey: undefined }, /apiKey/],
      ['apiKey empty', { apiKey: '' }, /apiKey/],
      ['apiKey not a string', { apiKey: 123 }, /apiKey/],
      ['an unknown option', { maxQueriesPerMin: 3 }, /unknown option maxQueriesPerMin/],
      [
        'an unknown option, listing the known ones',
        { retry: 3 },
        /unknown option retry \(known: .*\bretries\b/,
      ],
      ['an option named like an Object method', { toString: 'x' }, /unknown option toString/],
      ['an option named constructor', { constructor: 1 }, /unknown option constructor/],
      ['maxQueriesPerMinute not an integer', { maxQueriesPerMinute: 1.5 }, /maxQueriesPerMinute/],
      ['maxQueriesPerMinute 0', { maxQueriesPerMinute: 0 }, /maxQueriesPerMinute/],
      ['maxQueriesPerMinute negative', { maxQueriesPerMinute: -3 }, /maxQueriesPerMinute/],
      ['cacheSize 0', { cacheSize: 0 }, /cacheSize/],
      ['minIntervalMs negative', { minIntervalMs: -1 }, /minIntervalMs/],
      ['blockCooldownMs negative', { blockCooldownMs: -1 }, /blockCooldownMs/],
      ['timeoutMs negative', { timeoutMs: -1 }, /timeoutMs/],
      ['timeoutMs 0', { timeoutMs: 0 }, /timeoutMs/],
      ['retries negative', { retries: -1 }, /retries/],
      ['retries not an integer', { retries: 1.5 }, /retries/],
      ['retryDelayMs negative', { retryDelayMs: -1 }, /retryDelayMs/],
      ['retryDelayMs not a number', { retryDelayMs: '5' }, /retryDelayMs/],
      ['minIntervalMs infinite', { minIntervalMs: Infinity }, /minIntervalMs/],
      ['fetch not a function', { fetch: 'fetch' }, /fetch/],
    ])('throws a TypeError for %s', (_what, options, names) => {
      const error = constructionError(options);
      expect(error.message).toMatch(/^createStatusClient: /);
      expect(error.message).toMatch(names);
    });

    it('throws a TypeError for no options at all', () => {
      expect(() => createStatusClient(undefined as unknown as StatusClientOptions)).toThrow(
        /^createStatusClient: /,
      );
    });

    it('ignores options set to undefined, so their defaults apply', async () => {
      const fetch = successfulService();
      const statusClient = createUntyped({
        baseUrl: BASE,
        apiKey: API_KEY,
        fetch,
        logger: quiet,
        maxQueriesPerMinute: undefined,
        minIntervalMs: undefined,
        timeoutMs: undefined,
      });
      expect((await statusClient.getStatus(ID)).state).toBe('SUCCESSFUL');
    });

    it('accepts zero for minIntervalMs, blockCooldownMs, retries and retryDelayMs', () => {
      expect(() =>
        client(successfulService(), { minIntervalMs: 0, blockCooldownMs: 0, retries: 0, retryDelayMs: 0 }),
      ).not.toThrow();
    });
  });
});
