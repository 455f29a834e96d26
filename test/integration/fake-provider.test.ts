import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import express from 'express';
import { ipnRouter } from 'ipn-kit';
import { createFakeProvider, type FakeProvider } from 'ipn-kit/testing';
import type { FakeProviderOptions } from '../../lib/testing/fake-provider-options.js';
import successful from '../fixtures/ipn-successful.json';
import { quiet } from '../helpers/quiet-logger.js';
import { startReceiver, type Receiver } from '../helpers/receiver.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, settle } from '../helpers/servers.js';

const API_KEY = 'test-key';
const run = promisify(execFile);
let provider: FakeProvider;
let receiver: Receiver;

async function start(options: Partial<FakeProviderOptions> = {}, statuses: number[] = [], holdUntil = 0) {
  provider = await createFakeProvider({ apiKey: API_KEY, resendIntervalMs: 10, ...options });
  receiver = await startReceiver({ statuses, holdUntil });
}
afterEach(async () => {
  await provider?.close();
  await receiver?.close();
});

const ipnUrl = () => `${receiver.url}/ipn`;
const plan = { amount: 5000, customData: 'order-1', outcome: 'SUCCESSFUL' } as const;

async function status(body: unknown, via: FakeProvider = provider) {
  const response = await fetch(`${via.statusBaseUrl}/status`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: response.status, body: (await response.json()) as any };
}
const ask = (transactionId: string, apiKey = API_KEY) =>
  status({ api_key: apiKey, transaction_ids: transactionId });

describe('createFakeProvider options', () => {
  test('apiKey is required: a TypeError says so (from JavaScript; TypeScript refuses it already)', async () => {
    await expect(createFakeProvider({} as never)).rejects.toThrow(
      new TypeError(
        "createFakeProvider: apiKey is required, a non-empty string such as 'test-key' (got undefined)",
      ),
    );
    await expect(createFakeProvider(undefined as never)).rejects.toThrow(TypeError);
  });

  test('an unknown option or a bad value is a TypeError naming it', async () => {
    await expect(createFakeProvider({ apiKey: 'k', retries: 3 } as never)).rejects.toThrow(
      /unknown option retries/,
    );
    await expect(createFakeProvider({ apiKey: 'k', resends: -1 })).rejects.toThrow(
      'createFakeProvider: resends must be an integer of at least 0 (got -1)',
    );
    await expect(createFakeProvider({ apiKey: 'k', dataShape: 'list' as never })).rejects.toThrow(
      /dataShape/,
    );
    await expect(createFakeProvider({ apiKey: 'k', processingMs: Infinity })).rejects.toThrow(/processingMs/);
  });

  test('listens on 127.0.0.1 and names its status base URL', async () => {
    await start();
    expect(provider.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(provider.statusBaseUrl).toBe(`${provider.url}/api_v1/transaction`);
  });
});

describe('the status endpoint', () => {
  test('a known id answers 200 with the status-form record as data', async () => {
    await start();
    const tx = provider.initiate({ ...plan, ipnUrl: ipnUrl(), deliver: false });
    await tx.delivered;

    const answer = await ask(tx.transactionId);

    expect(answer.status).toBe(200);
    expect(answer.body).toMatchObject({ message: '', statut_code: 200 });
    const keys = Object.keys(successful).filter(
      (key) => !['response', 'sms_link', 'ipn_state', 'w_amount_after_transaction'].includes(key),
    );
    expect(Object.keys(answer.body.data)).toEqual(keys);
    expect(answer.body.data).toMatchObject({
      transaction_id: tx.transactionId,
      amount: 5000,
      comission: 75,
      state: 'SUCCESSFUL',
      custom_data: 'order-1',
      error: '',
      p_last_wallet_amount: null,
      p_id: 7,
      hash: null,
    });
    expect(provider.stats.statusQueries).toBe(1);
    expect(provider.statusQueriesFor(tx.transactionId)).toBe(1);
  });

  test("dataShape 'array' answers the record inside an array; transaction_id is accepted too", async () => {
    await start({ dataShape: 'array' });
    const tx = provider.initiate({ ...plan, ipnUrl: ipnUrl(), deliver: false, outcome: 'FAILED' });
    await tx.delivered;

    const answer = await status({ api_key: API_KEY, transaction_id: tx.transactionId });

    expect(answer.body.statut_code).toBe(200);
    expect(answer.body.data).toHaveLength(1);
    expect(answer.body.data[0]).toMatchObject({ transaction_id: tx.transactionId, state: 'FAILED' });
  });

  test('an unknown id, or a known id under another api_key, answers statut_code 404 with the id as data', async () => {
    await start();
    const tx = provider.initiate({ ...plan, ipnUrl: ipnUrl(), deliver: false });

    const unknown = await ask('EFB.999999');
    const wrongKey = await ask(tx.transactionId, 'another-key');

    expect(unknown).toEqual({
      status: 200,
      body: { data: ['EFB.999999'], message: 'transaction not found', statut_code: 404 },
    });
    expect(wrongKey).toEqual({
      status: 200,
      body: { data: [tx.transactionId], message: 'transaction not found', statut_code: 404 },
    });
  });

  test('a body that is not JSON or lacks a field answers 400; other paths 404; all status queries count', async () => {
    await start();

    const notJson = await status('{"api_key":');
    const noId = await status({ api_key: API_KEY });
    const noKey = await status({ transaction_ids: 'EFB.000001' });
    const elsewhere = await fetch(`${provider.url}/api_v1/transaction/airtime`, { method: 'POST' });

    for (const answer of [notJson, noId, noKey]) {
      expect(answer.status).toBe(400);
      expect(answer.body).toMatchObject({ data: [], statut_code: 400 });
    }
    expect(notJson.body.message).toMatch(/not JSON/);
    expect(noId.body.message).toMatch(/transaction_ids is missing/);
    expect(noKey.body.message).toMatch(/api_key is missing/);
    expect(elsewhere.status).toBe(404);
    expect(await elsewhere.json()).toMatchObject({ statut_code: 404 });
    expect(provider.stats.statusQueries).toBe(3);
  });

  test('a transaction is PENDING1 until processingMs has passed', async () => {
    await start({ processingMs: 60_000 });
    const tx = provider.initiate({ ...plan, ipnUrl: ipnUrl(), outcome: 'FAILED' });

    const answer = await ask(tx.transactionId);

    expect(answer.body.data).toMatchObject({ state: 'PENDING1', error: '' });
    expect(provider.transaction(tx.transactionId)?.state).toBe('PENDING1');
    expect(receiver.bodies).toHaveLength(0);
  });

  test('once processed, the transaction is in its final state', async () => {
    await start({ processingMs: 20 });
    const tx = provider.initiate({ ...plan, ipnUrl: ipnUrl(), outcome: 'FAILED', deliver: false });

    await tx.delivered;
    const answer = await ask(tx.transactionId);

    expect(answer.body.data).toMatchObject({ state: 'FAILED', error: 'insufficient balance' });
  });

  test('setState changes what status queries answer', async () => {
    await start();
    const tx = provider.initiate({ ...plan, ipnUrl: ipnUrl(), deliver: false });
    await tx.delivered;

    provider.setState(tx.transactionId, 'PENDING');

    expect((await ask(tx.transactionId)).body.data.state).toBe('PENDING');
    expect(() => provider.setState('EFB.404404', 'FAILED')).toThrow(/no transaction EFB\.404404/);
  });

  test('a state set while processing stays; the notification still carries the outcome', async () => {
    await start({ processingMs: 20 });
    const tx = provider.initiate({ ...plan, ipnUrl: ipnUrl() });

    provider.setState(tx.transactionId, 'PENDING');
    await tx.delivered;

    expect((await ask(tx.transactionId)).body.data.state).toBe('PENDING');
    expect(receiver.bodies.map((body) => body.state)).toEqual(['SUCCESSFUL']);
  });

  test('after blockAfter queries every further one is answered 429, and counted', async () => {
    await start({ blockAfter: 2 });
    const tx = provider.initiate({ ...plan, ipnUrl: ipnUrl(), deliver: false });
    await tx.delivered;

    const answers = [await ask(tx.transactionId), await ask(tx.transactionId), await ask(tx.transactionId)];
    const unknown = await ask('EFB.999999');

    expect(answers.map((answer) => answer.status)).toEqual([200, 200, 429]);
    expect(answers[2]?.body).toEqual({
      data: [],
      message: 'too many requests: caller blocked',
      statut_code: 429,
    });
    expect(unknown.status).toBe(429);
    expect(provider.stats).toMatchObject({ statusQueries: 4, statusQueriesBlocked: 2 });
    expect(provider.statusQueriesFor(tx.transactionId)).toBe(3);
  });

  test('a block lasts blockForMs, then queries are answered again', async () => {
    await start({ blockAfter: 1, blockForMs: 20 });

    const first = await ask('EFB.000001');
    const blocked = await ask('EFB.000001');
    await sleep(40);
    const later = await ask('EFB.000001');

    expect([first.status, blocked.status, later.status]).toEqual([200, 429, 200]);
  });

  test('block() and unblock() block status queries by hand', async () => {
    await start();

    provider.block();
    const blocked = await ask('EFB.000001');
    provider.unblock();
    const unblocked = await ask('EFB.000001');

    expect(blocked.status).toBe(429);
    expect(unblocked.body.statut_code).toBe(404);
    expect(provider.stats.statusQueriesBlocked).toBe(1);
  });

  test('statusDelayMs holds the answer: a request sent later is answered first', async () => {
    // Long enough that no busy machine could answer the status first; close() ends the wait.
    await start({ statusDelayMs: 60_000 });
    const order: string[] = [];

    const slow = ask('EFB.000001').then(
      () => order.push('status'),
      () => order.push('closed'),
    );
    while (provider.stats.statusQueries === 0) await sleep(5);
    await fetch(`${provider.url}/elsewhere`).then(() => order.push('other'));

    expect(order).toEqual(['other']); // the status answer is still held
    await provider.close();
    await slow;
  });
});

describe('notifications', () => {
  test('the IPN body has every field of the service samples, in their shapes', async () => {
    await start();
    const tx = provider.initiate({ ...plan, ipnUrl: ipnUrl(), customData: 42 });

    await tx.delivered;

    const body = receiver.bodies[0]!;
    expect(Object.keys(body)).toEqual(Object.keys(successful));
    expect(body).toMatchObject({
      transaction_id: tx.transactionId,
      state: 'SUCCESSFUL',
      response: 'operation success',
      error: '',
      custom_data: 42,
      comission: 75,
      hash: '',
      p_id: '7',
    });
    expect(body.created_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00$/);
    expect(tx.transactionId).toMatch(/^FKP\.\d{6}$/);
  });

  test('each initiate gets a unique id unless one is given; a taken id is a TypeError', async () => {
    await start();
    const ids = [1, 2].map(
      () => provider.initiate({ ...plan, ipnUrl: ipnUrl(), deliver: false }).transactionId,
    );
    const chosen = provider.initiate({
      ...plan,
      ipnUrl: ipnUrl(),
      deliver: false,
      transactionId: 'EFB.001158',
    });

    expect(new Set(ids).size).toBe(2);
    expect(chosen.transactionId).toBe('EFB.001158');
    expect(() => provider.initiate({ ...plan, ipnUrl: ipnUrl(), transactionId: 'EFB.001158' })).toThrow(
      'initiate: transactionId EFB.001158 was already used by this provider',
    );
  });

  test('bad initiate options are TypeErrors that name the option', async () => {
    await start();
    expect(() => provider.initiate({ ...plan, ipnUrl: 'not a url' })).toThrow(
      /ipnUrl must be an http\(s\) URL/,
    );
    expect(() => provider.initiate({ ...plan, ipnUrl: ipnUrl(), amount: 0 })).toThrow(/amount must be/);
    expect(() => provider.initiate({ ...plan, ipnUrl: ipnUrl(), outcome: 'PENDING' as never })).toThrow(
      /outcome must be 'SUCCESSFUL' or 'FAILED'/,
    );
    expect(() => provider.initiate({ ...plan, ipnUrl: ipnUrl(), concurrent: 0 })).toThrow(/concurrent/);
  });

  test('an endpoint answering 500 twice then 200 gets 3 attempts and acknowledges', async () => {
    await start({}, [500, 500]);
    const tx = provider.initiate({ ...plan, ipnUrl: ipnUrl() });

    expect(await tx.delivered).toEqual({ attempts: 3, statuses: [500, 500, 200], acknowledged: true });
    expect(receiver.bodies).toHaveLength(3);
    expect(new Set(receiver.bodies.map((body) => JSON.stringify(body))).size).toBe(1);
    expect(provider.stats).toMatchObject({ notificationsSent: 3, answers: { 500: 2, 200: 1 } });
  });

  test('when resends are exhausted the delivery ends unacknowledged after 1 + resends attempts', async () => {
    await start({ resends: 2 }, [503, 503, 503, 503]);
    const tx = provider.initiate({ ...plan, ipnUrl: ipnUrl() });

    expect(await tx.delivered).toEqual({ attempts: 3, statuses: [503, 503, 503], acknowledged: false });
    expect(receiver.bodies).toHaveLength(3);
  });

  test('a redirect is not followed: the 301 is recorded, resent, and never acknowledged', async () => {
    await start({ resends: 1 });
    const ipn = ipnRouter({ logger: quiet });
    const events = recordEvents(ipn);
    const gets: string[] = [];
    const app = express();
    app.post('/moved', (_req, res) => res.redirect(301, '/ipn'));
    app.use((req, _res, next) => {
      if (req.method === 'GET') gets.push(req.url);
      next();
    });
    app.use('/ipn', ipn); // it answers a GET 200: a followed redirect would look acknowledged
    const host = await listen(app);
    try {
      const tx = provider.initiate({ ...plan, ipnUrl: `${host.url}/moved` });

      expect(await tx.delivered).toEqual({ attempts: 2, statuses: [301, 301], acknowledged: false });
      expect(gets).toEqual([]);
      expect(events.names()).toEqual([]);
      expect(provider.stats).toMatchObject({ notificationsSent: 2, answers: { 301: 2 } });
    } finally {
      await host.close();
    }
  });

  test('a network error counts as status 0 and is resent', async () => {
    await start({ resends: 1 });
    await receiver.close(); // nothing listens there any more
    const tx = provider.initiate({ ...plan, ipnUrl: ipnUrl() });

    expect(await tx.delivered).toEqual({ attempts: 2, statuses: [0, 0], acknowledged: false });
    expect(provider.stats).toMatchObject({ notificationsSent: 2, answers: {} });
  });

  test('concurrent copies of the first delivery arrive at the same time', async () => {
    await start({}, [], 3);
    const tx = provider.initiate({ ...plan, ipnUrl: ipnUrl(), concurrent: 3 });

    expect(await tx.delivered).toMatchObject({ attempts: 3, acknowledged: true });
    expect(receiver.bodies).toHaveLength(3);
    expect(receiver.maxInFlight()).toBe(3);
  });

  test('duplicates are sent one after another after the acknowledgment', async () => {
    await start();
    const tx = provider.initiate({ ...plan, ipnUrl: ipnUrl(), duplicates: 2 });

    expect(await tx.delivered).toEqual({ attempts: 3, statuses: [200, 200, 200], acknowledged: true });
    expect(receiver.bodies.map((body) => body.transaction_id)).toEqual(Array(3).fill(tx.transactionId));
    expect(receiver.maxInFlight()).toBe(1);
  });

  test('a duplicate answered otherwise than 200 is resent until acknowledged, as the service does', async () => {
    // The first copy 200; the first duplicate 503 twice (a copy met while the first is verified), then 200;
    // the second duplicate 500 once, then 200.
    await start({}, [200, 503, 503, 200, 500, 200]);
    const tx = provider.initiate({ ...plan, ipnUrl: ipnUrl(), duplicates: 2 });

    expect(await tx.delivered).toEqual({
      attempts: 6,
      statuses: [200, 503, 503, 200, 500, 200],
      acknowledged: true,
    });
    expect(receiver.bodies.map((body) => body.transaction_id)).toEqual(Array(6).fill(tx.transactionId));
    expect(receiver.maxInFlight()).toBe(1);
    expect(provider.stats).toMatchObject({ notificationsSent: 6, answers: { 200: 3, 500: 1, 503: 2 } });
  });

  test('a duplicate is resent `resends` times at most, then the next duplicate is sent', async () => {
    await start({ resends: 1 }, [200, 503, 503, 200]);
    const tx = provider.initiate({ ...plan, ipnUrl: ipnUrl(), duplicates: 2 });

    // The real notification was acknowledged: the duplicate the endpoint never acknowledged does not undo it.
    expect(await tx.delivered).toEqual({ attempts: 4, statuses: [200, 503, 503, 200], acknowledged: true });
  });

  test('outOfOrder notifies the opposite final state first, then the real one', async () => {
    await start();
    const tx = provider.initiate({ ...plan, ipnUrl: ipnUrl(), outOfOrder: true });

    expect(await tx.delivered).toMatchObject({ attempts: 2, acknowledged: true });
    expect(receiver.bodies.map((body) => [body.state, body.response, body.error])).toEqual([
      ['FAILED', '', 'insufficient balance'],
      ['SUCCESSFUL', 'operation success', ''],
    ]);
  });

  test('deliver: false makes the transaction final but sends nothing', async () => {
    await start();
    const tx = provider.initiate({ ...plan, ipnUrl: ipnUrl(), deliver: false });

    expect(await tx.delivered).toEqual({ attempts: 0, statuses: [], acknowledged: false });
    expect(receiver.bodies).toHaveLength(0);
    expect(provider.stats.notificationsSent).toBe(0);
    expect(provider.transaction(tx.transactionId)?.state).toBe('SUCCESSFUL');
  });

  test('forge sends one notification for an id never processed, or altered fields for a real one', async () => {
    await start({}, [401]);
    const tx = provider.initiate({ ...plan, ipnUrl: ipnUrl(), deliver: false });

    const stranger = await provider.forge({ ipnUrl: ipnUrl() });
    const altered = await provider.forge({
      ipnUrl: ipnUrl(),
      transactionId: tx.transactionId,
      amount: 1,
      hash: 'x',
    });

    expect([stranger, altered]).toEqual([401, 200]);
    expect(receiver.bodies[0]).toMatchObject({ transaction_id: 'FRG.000001', state: 'SUCCESSFUL' });
    expect(provider.transaction('FRG.000001')).toBeUndefined();
    expect(receiver.bodies[1]).toMatchObject({
      transaction_id: tx.transactionId,
      custom_data: 'order-1',
      amount: 1,
      hash: 'x',
    });
    expect(provider.stats).toMatchObject({ notificationsSent: 2, answers: { 401: 1, 200: 1 } });
  });
});

describe('into a real ipnRouter', () => {
  async function startApp() {
    const ipn = ipnRouter({ logger: quiet });
    const recorder = recordEvents(ipn);
    const app = express();
    app.use('/ipn', ipn);
    const running = await listen(app);
    return { recorder, running, ipnUrl: `${running.url}/ipn` };
  }

  test('a SUCCESSFUL initiate emits one successful event with its custom_data', async () => {
    await start();
    const app = await startApp();
    try {
      const tx = provider.initiate({ ...plan, ipnUrl: app.ipnUrl, customData: 'order-7' });
      expect(await tx.delivered).toMatchObject({ acknowledged: true });
      await settle();

      expect(app.recorder.of('successful')).toEqual([
        expect.objectContaining({ transaction_id: tx.transactionId, custom_data: 'order-7', commission: 75 }),
      ]);
    } finally {
      await app.running.close();
    }
  });

  test('a delivery with duplicates: 2 still emits one successful event', async () => {
    await start();
    const app = await startApp();
    try {
      const tx = provider.initiate({ ...plan, ipnUrl: app.ipnUrl, duplicates: 2 });
      expect(await tx.delivered).toEqual({ attempts: 3, statuses: [200, 200, 200], acknowledged: true });
      await settle();

      expect(app.recorder.count('successful')).toBe(1);
      expect(app.recorder.count('duplicate')).toBe(2);
    } finally {
      await app.running.close();
    }
  });
});

describe('close()', () => {
  const count = (kind: string) =>
    process.getActiveResourcesInfo().filter((name) => name.startsWith(kind)).length;
  /**
   * Sockets and servers, and live timers: "no more than before", as others' come and go (a worker runs many
   * test files in one process: an earlier file's idle pooled connection may close while this test runs).
   */
  const snapshot = () => ({ tcp: count('TCP'), timers: count('Timeout') });

  test('stops pending work, resolves pending deliveries and leaves no handle behind', async () => {
    await settle(); // let the previous test's servers finish closing
    const before = snapshot();
    await start({ processingMs: 60_000 }, [500]);
    const pending = provider.initiate({ ...plan, ipnUrl: ipnUrl() });
    const second = await createFakeProvider({
      apiKey: API_KEY,
      resendIntervalMs: 60_000,
      statusDelayMs: 60_000,
    });
    const resending = second.initiate({ ...plan, ipnUrl: ipnUrl() });
    const slowQuery = status({ api_key: API_KEY, transaction_ids: 'EFB.000001' }, second).catch(
      () => 'no answer',
    );
    while (second.stats.notificationsSent === 0 || second.stats.statusQueries === 0) await sleep(5);
    // Our three timers (processing, resend, status delay) are live; "before" may hold a passing foreign one.
    expect(snapshot().timers).toBeGreaterThanOrEqual(before.timers + 2);

    await Promise.all([provider.close(), second.close(), receiver.close()]);

    expect(await pending.delivered).toEqual({ attempts: 0, statuses: [], acknowledged: false });
    expect(await resending.delivered).toEqual({ attempts: 1, statuses: [500], acknowledged: false });
    expect(await slowQuery).toBe('no answer');
    expect(() => provider.initiate({ ...plan, ipnUrl: 'http://127.0.0.1:1/ipn' })).toThrow(/closed/);
    // Closed sockets are released a few ticks later: give them up to 2 s.
    let after = snapshot();
    for (let wait = 0; wait < 200 && (after.tcp > before.tcp || after.timers > before.timers); wait += 1) {
      await sleep(10);
      after = snapshot();
    }
    expect(after.tcp).toBeLessThanOrEqual(before.tcp);
    expect(after.timers).toBeLessThanOrEqual(before.timers);
  });
});

describe('many transactions at once', () => {
  // Node prints the warning on its own process, which Jest's sandboxed `process` does not hear: the provider
  // runs in a child process of its own, and what it printed is read.
  test("twenty in flight: delivered, and no MaxListenersExceededWarning (each holds a listener on the provider's stop signal)", async () => {
    receiver = await startReceiver();
    const script = `
      const testing = await import('./lib/testing.ts');
      const { createFakeProvider } = testing.createFakeProvider ? testing : testing.default;
      const provider = await createFakeProvider({ apiKey: 'k', processingMs: 50, resendIntervalMs: 10 });
      const txs = Array.from({ length: 20 }, (_, i) => provider.initiate({
        amount: 5000, customData: 'order-' + i, outcome: 'SUCCESSFUL', ipnUrl: ${JSON.stringify(ipnUrl())},
      }));
      const reports = await Promise.all(txs.map((tx) => tx.delivered));
      await provider.close();
      console.log(reports.filter((report) => report.acknowledged).length);
    `;
    const { stdout, stderr } = await run(
      process.execPath,
      ['--import', 'tsx', '--input-type=module', '-e', script],
      {
        cwd: join(__dirname, '../..'),
      },
    );
    expect(stdout.trim()).toBe('20');
    expect(receiver.bodies).toHaveLength(20);
    expect(stderr).not.toContain('MaxListenersExceededWarning');
  });
});
