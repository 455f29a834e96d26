import { createStatusClient, ipnRouter, MemoryStore } from '../../lib/index.js';
import { createFakeProvider, type FakeProvider } from '../../lib/testing.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, settle, type Running } from '../helpers/servers.js';

/** A genuine FAILED must not open the door to a forged SUCCESSFUL of the same expected transaction. */
test('after a genuine FAILED, a forged SUCCESSFUL with another amount is still rejected by the expectation', async () => {
  const ipn = ipnRouter({ store: new MemoryStore(), logger: quiet });
  const recorder = recordEvents(ipn);
  const post = (body: object) =>
    ipn.fetch(
      new Request('https://shop.example/ipn', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      }),
    );
  await ipn.expect('EXP.000009', { amount: 5000, customData: 'order-9' });

  const failed = await post({
    transaction_id: 'EXP.000009',
    state: 'FAILED',
    custom_data: 'order-9',
    amount: 5000,
  });
  await settle();
  const forged = { transaction_id: 'EXP.000009', state: 'SUCCESSFUL', custom_data: 'order-9', amount: 1 };
  const forgery = await post(forged);
  await settle();
  const genuine = { ...forged, amount: 5000 };
  const late = await post(genuine); // the service turned it SUCCESSFUL after all
  await settle();

  expect([failed.status, forgery.status, late.status]).toEqual([200, 200, 200]);
  expect(recorder.of('failed').map((n) => n.amount)).toEqual([5000]);
  expect(recorder.of('rejected').map((e) => e.notification.amount)).toEqual([1]);
  expect(recorder.of('successful').map((n) => n.amount)).toEqual([5000]);
  await ipn.close();
});

/**
 * The same rule when the FAILED comes from the sweep's status query (its notification never arrived): the
 * expectation stays, so a forged SUCCESSFUL that follows is still checked against it.
 */
describe('after the sweep confirms a FAILED through the status query', () => {
  let provider: FakeProvider;
  let running: Running | undefined;
  beforeAll(async () => {
    provider = await createFakeProvider({ apiKey: 'test-key' });
  });
  afterEach(async () => running?.close());
  afterAll(async () => provider.close());

  test('a forged SUCCESSFUL with another amount is still rejected by the expectation', async () => {
    const ipn = ipnRouter({
      store: new MemoryStore(),
      statusClient: createStatusClient({ baseUrl: provider.statusBaseUrl, apiKey: 'test-key' }),
      reconcileAfterMs: 1, // due at once: the test sweeps by hand
      sweepIntervalMs: 2 ** 31 - 1,
      logger: quiet,
    });
    const recorder = recordEvents(ipn);
    running = await listen(ipn);
    const ipnUrl = `${running.url}/ipn`;
    // The payment fails and its notification is lost: only the status query can tell.
    const payment = provider.initiate({
      amount: 5000,
      ipnUrl,
      customData: 'order-10',
      outcome: 'FAILED',
      deliver: false,
    });
    await payment.delivered;
    const id = payment.transactionId;
    await ipn.expect(id, { amount: 5000, customData: 'order-10' });
    await new Promise((resolve) => setTimeout(resolve, 5)); // past reconcileAfterMs

    expect(await ipn.sweep()).toMatchObject({ queried: 1, reconciled: 1 });
    await settle();
    const forgery = await provider.forge({ ipnUrl, transactionId: id, state: 'SUCCESSFUL', amount: 1 });
    await settle();
    provider.setState(id, 'SUCCESSFUL'); // the service turns it SUCCESSFUL after all, and notifies it
    const late = await provider.forge({ ipnUrl, transactionId: id, state: 'SUCCESSFUL' });
    await settle();

    expect([forgery, late]).toEqual([200, 200]);
    expect(recorder.of('failed').map((n) => n.amount)).toEqual([5000]);
    expect(recorder.of('rejected').map((e) => e.notification.amount)).toEqual([1]);
    expect(recorder.of('successful').map((n) => n.amount)).toEqual([5000]);
    expect(provider.statusQueriesFor(id)).toBe(1);
    await ipn.close();
  });
});
