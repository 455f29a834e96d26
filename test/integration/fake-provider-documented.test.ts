import { createHmac } from 'node:crypto';
import express from 'express';
import { createStatusClient, hmacAuthenticator, ipnRouter, StatusRateLimitError } from 'ipn-kit';
import { createFakeProvider, type FakeProvider } from 'ipn-kit/testing';
import type { FakeProviderOptions } from '../../lib/testing/fake-provider-options.js';
import { quiet } from '../helpers/quiet-logger.js';
import { startReceiver, type Receiver } from '../helpers/receiver.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, settle, type Running } from '../helpers/servers.js';

const API_KEY = 'test-key';
const SECRET = 'the-hash-secret-of-the-service';
const plan = { amount: 5000, customData: 'order-1', outcome: 'SUCCESSFUL' } as const;
const hmac = (text: string) => createHmac('sha256', SECRET).update(text).digest('hex');

let provider: FakeProvider | undefined;
const closers: Array<{ close: () => Promise<void> }> = [];
afterEach(async () => {
  await provider?.close();
  await Promise.all(closers.splice(0).map((item) => item.close()));
});

async function start(options: Partial<FakeProviderOptions>) {
  provider = await createFakeProvider({ apiKey: API_KEY, resendIntervalMs: 10, ...options });
  return provider;
}

async function receiver(): Promise<Receiver> {
  const started = await startReceiver();
  closers.push(started);
  return started;
}

describe("the fake provider plays the service's documented variants", () => {
  test("successState 'SUCCESS' and responseField 'reponse' write notifications as the IPN configuration page does", async () => {
    const fake = await start({ successState: 'SUCCESS', responseField: 'reponse' });
    const endpoint = await receiver();
    await fake.initiate({ ...plan, ipnUrl: `${endpoint.url}/ipn` }).delivered;

    const [body] = endpoint.bodies;
    expect(body).toMatchObject({ state: 'SUCCESS', reponse: 'operation success' });
    expect(body).not.toHaveProperty('response');
    // Status answers keep SUCCESSFUL.
    const client = createStatusClient({ baseUrl: fake.statusBaseUrl, apiKey: API_KEY, logger: quiet });
    expect((await client.getStatus(body?.transaction_id as string)).state).toBe('SUCCESSFUL');
  });

  test('such a notification is credited once by ipnRouter, resends included', async () => {
    const fake = await start({ successState: 'SUCCESS', responseField: 'reponse' });
    const ipn = ipnRouter({ logger: quiet });
    const recorder = recordEvents(ipn);
    const app = express();
    app.use('/ipn', ipn);
    const running: Running = await listen(app);
    closers.push(running);
    const report = await fake.initiate({ ...plan, ipnUrl: `${running.url}/ipn`, duplicates: 2 }).delivered;
    await settle();

    expect(report).toMatchObject({ acknowledged: true, attempts: 3 });
    expect(recorder.names()).toEqual(['notification', 'successful', 'duplicate', 'duplicate']);
    expect(recorder.of('successful')[0]).toMatchObject({
      rawState: 'SUCCESS',
      response: 'operation success',
    });
  });

  test('hashSecret signs hash (JSON without hash) and x-signature (the body as sent), checked independently', async () => {
    const fake = await start({ hashSecret: SECRET });
    const headers: Array<string | undefined> = [];
    const texts: string[] = [];
    const app = express();
    app.post('/ipn', express.text({ type: '*/*' }), (req: express.Request, res: express.Response) => {
      headers.push(req.headers['x-signature'] as string | undefined);
      texts.push(req.body as string);
      res.json({ ok: true });
    });
    const running = await listen(app);
    closers.push(running);
    await fake.initiate({ ...plan, ipnUrl: `${running.url}/ipn` }).delivered;

    const text = texts[0] as string;
    const body = JSON.parse(text) as Record<string, unknown>;
    const { hash, ...unsigned } = body;
    expect(hash).toBe(hmac(JSON.stringify(unsigned)));
    expect(headers[0]).toBe(hmac(JSON.stringify(body)));
  });

  test.each([
    ['header', { header: 'x-signature' }],
    ['field', { field: 'hash' }],
  ])('signed notifications pass hmacAuthenticator (%s); forgeries are answered 401', async (_case, where) => {
    const fake = await start({ hashSecret: SECRET });
    const ipn = ipnRouter({ logger: quiet, authenticate: hmacAuthenticator({ secret: SECRET, ...where }) });
    const recorder = recordEvents(ipn);
    const app = express();
    app.use('/ipn', ipn);
    const running = await listen(app);
    closers.push(running);

    const report = await fake.initiate({ ...plan, ipnUrl: `${running.url}/ipn` }).delivered;
    const forged = await fake.forge({ ipnUrl: `${running.url}/ipn`, amount: 900_000 });
    await settle();

    expect(report.acknowledged).toBe(true);
    expect(forged).toBe(401);
    expect(recorder.names()).toEqual(['notification', 'successful', 'invalid']);
    expect(recorder.of('invalid')[0]).toMatchObject({ reason: 'unauthorized' });
  });

  test("a block's 429 gives the wait in its message, and the status client waits that long", async () => {
    const fake = await start({ blockAfter: 0, blockForMs: 30 * 60_000 });
    const answer = await fetch(`${fake.statusBaseUrl}/status`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ api_key: API_KEY, transaction_ids: 'EFB.1' }),
    });
    expect(answer.status).toBe(429);
    expect(await answer.json()).toEqual({
      data: [],
      message: 'too many requests: caller blocked, retry in 1800 seconds',
      statut_code: 429,
    });

    const client = createStatusClient({
      baseUrl: fake.statusBaseUrl,
      apiKey: API_KEY,
      logger: quiet,
      retries: 0,
      blockCooldownMs: 1_000,
    });
    await expect(client.getStatus('EFB.2')).rejects.toMatchObject({ blocked: true });
    const refusal = await client.getStatus('EFB.3').catch((error: unknown) => error);
    expect(refusal).toBeInstanceOf(StatusRateLimitError);
    expect((refusal as StatusRateLimitError).retryAfterMs).toBeGreaterThan(29 * 60_000);
  });

  test('the new options are checked', async () => {
    await expect(createFakeProvider({ apiKey: 'k', successState: 'OK' as never })).rejects.toThrow(
      /successState/,
    );
    await expect(createFakeProvider({ apiKey: 'k', responseField: 'resp' as never })).rejects.toThrow(
      /responseField/,
    );
    await expect(createFakeProvider({ apiKey: 'k', hashSecret: '' })).rejects.toThrow(/hashSecret/);
  });
});
