import request from 'supertest';
import { createStatusClient } from 'ipn-kit';
import { createFakeProvider, type FakeProvider } from 'ipn-kit/testing';
import { calls } from '../../examples/snippets/context.js';
import { successfulPayload } from '../helpers/payloads.js';
import { until } from '../helpers/until.js';

// The documentation's snippets (examples/snippets/), run: those that need no outside service. Those that
// open a Redis connection at load run in redis-snippets.test.ts; postgres-store.ts and status-client.ts
// (a top-level await, an `apiKey` of yours) are type-checked only.

beforeEach(() => {
  calls.length = 0;
});

test('the notification page: a matching custom_data is credited, one that does not match is flagged', async () => {
  const { ipn } = await import('../../examples/snippets/custom-data.js');
  const custom = (transactionId: string, customData: string) =>
    successfulPayload({ transaction_id: transactionId, custom_data: customData, amount: 5000 });
  await request(ipn).post('/').send(custom('EFB.100001', '{"orderId":"order-1"}')).expect(200);
  await request(ipn).post('/').send(custom('EFB.100002', 'not json')).expect(200);
  await until(() => calls.length === 2, 'both listeners');
  expect(calls).toEqual([
    ['credit', 'order-1', 5000],
    ['flagForReview', 'EFB.100002'],
  ]);
});

describe('the verification page, against the fake payment service', () => {
  let provider: FakeProvider;
  beforeAll(async () => {
    provider = await createFakeProvider({ apiKey: 'snippet-key', resendIntervalMs: 10 });
  });
  afterAll(() => provider.close());

  test('verify credits what the service confirms and alerts on a forgery; reconcile asks the service', async () => {
    const { verifiedRouter, reconcileOne } = await import('../../examples/snippets/verify.js');
    const ipn = verifiedRouter(
      createStatusClient({ baseUrl: provider.statusBaseUrl, apiKey: 'snippet-key' }),
    );
    // A forged copy of a real payment, naming another order: rejected, and the service's record credited.
    // (A forged id the service does not know is rejected too, once the service says so twice, a minute apart.)
    provider.initiate({
      transactionId: 'EFB.999999',
      amount: 5000,
      ipnUrl: 'http://127.0.0.1:9/',
      customData: 'order-9',
      outcome: 'SUCCESSFUL',
      deliver: false,
    });
    await until(() => provider.transaction('EFB.999999')?.state === 'SUCCESSFUL', 'processing');
    const forged = successfulPayload({
      transaction_id: 'EFB.999999',
      custom_data: 'order-666',
      amount: 5000,
    });
    await request(ipn).post('/').send(forged).expect(200);
    await until(() => calls.length === 2, 'the rejected and successful listeners');
    expect(calls).toEqual([
      ['alert', 'mismatch', ['custom_data'], 'EFB.999999'],
      ['credit', 'order-9', 5000],
    ]);

    // The snippet reconciles PIX_22827809: the service processed it, and no notification ever came.
    provider.initiate({
      transactionId: 'PIX_22827809',
      amount: 7000,
      ipnUrl: 'http://127.0.0.1:9/',
      customData: 'order-7',
      outcome: 'SUCCESSFUL',
      deliver: false,
    });
    const { emitted } = await reconcileOne(ipn);
    expect(emitted).toBe(true);
    expect(calls[2]).toEqual(['credit', 'order-7', 7000]);
    await ipn.close();
  });
});

test('the secret snippet: the address it builds gets through, a request without its token gets 401', async () => {
  process.env.IPN_SECRET = 'a-secret-of-at-least-16-characters';
  const { address } = await import('../../examples/snippets/secret.js');
  const { app } = await import('../../examples/snippets/context.js');
  const token = new URL(address).search;
  await request(app)
    .post('/ipn')
    .send(successfulPayload({ transaction_id: 'EFB.200001' }))
    .expect(401);
  await request(app)
    .post(`/ipn${token}`)
    .send(successfulPayload({ transaction_id: 'EFB.200001' }))
    .expect(200);
});

test('the Prometheus snippet: /metrics shows what the router counted', async () => {
  const { app, ipn } = await import('../../examples/snippets/context.js');
  await import('../../examples/snippets/prometheus.js');
  await request(ipn)
    .post('/')
    .send(successfulPayload({ transaction_id: 'EFB.300001' }))
    .expect(200);
  const metrics = await request(app).get('/metrics').expect(200);
  expect(metrics.text).toMatch(/^ipn_kit_notifications_received_total 1$/m);
});
