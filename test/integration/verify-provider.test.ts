import { createStatusClient, ipnRouter, type IpnRouter } from '../../lib/index.js';
import type { StatusClientOptions } from '../../lib/status/status-client.js';
import { createFakeProvider, type FakeProvider } from '../../lib/testing.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, type Running } from '../helpers/servers.js';
import { until } from '../helpers/until.js';

const API_KEY = 'partner-key';

let provider: FakeProvider;
const servers: Running[] = [];
const routers: IpnRouter[] = [];
beforeEach(async () => {
  provider = await createFakeProvider({ apiKey: API_KEY, resendIntervalMs: 10 });
});
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => server.close()));
  await Promise.all(routers.splice(0).map((router) => router.close()));
  await provider.close();
});

/** A partner endpoint that verifies every notification with the fake service's status query. */
async function partner(clientOptions: Partial<StatusClientOptions> = {}, verifyAttempts = 6) {
  const client = createStatusClient({
    baseUrl: provider.statusBaseUrl,
    apiKey: API_KEY,
    logger: quiet,
    retryDelayMs: 1,
    ...clientOptions,
  });
  const ipn = ipnRouter({ verify: client, logger: quiet, verifyRetryDelayMs: 5, verifyAttempts });
  routers.push(ipn);
  const recorder = recordEvents(ipn);
  const running = await listen(ipn);
  servers.push(running);
  return { ipn, client, recorder, ipnUrl: `${running.url}/` };
}

describe('ipnRouter({ verify }) against the fake payment service', () => {
  test('a genuine notification is emitted once, with its custom_data', async () => {
    const { recorder, ipnUrl } = await partner();
    const { transactionId, delivered } = provider.initiate({
      amount: 5000,
      ipnUrl,
      customData: 'order-1',
      outcome: 'SUCCESSFUL',
    });
    expect(await delivered).toMatchObject({ acknowledged: true });
    await until(() => recorder.count('successful') === 1, 'the successful event');
    expect(recorder.of('successful')[0]).toMatchObject({
      transaction_id: transactionId,
      custom_data: 'order-1',
      amount: 5000,
    });
    expect(recorder.count('rejected')).toBe(0);
  });

  test('a forged SUCCESSFUL for an id the service never processed is rejected once the service says so twice, never emitted', async () => {
    // Not-found is believed only when repeated at least minIntervalMs later (replicas may lag).
    const { client, recorder, ipnUrl } = await partner({ minIntervalMs: 200 });
    expect(await provider.forge({ ipnUrl, customData: 'order-2' })).toBe(200);
    await until(() => recorder.count('rejected') === 1, 'the rejected event');
    expect(recorder.of('rejected')[0]).toMatchObject({ reason: 'not_found' });
    expect(client.stats.queries).toBeGreaterThanOrEqual(2);
    expect(recorder.count('successful')).toBe(0);
  });

  test('a forged copy of a real transaction naming another order is rejected; the genuine record is credited instead', async () => {
    const { ipn, recorder, ipnUrl } = await partner();
    const { transactionId } = provider.initiate({
      amount: 5000,
      ipnUrl,
      customData: 'order-3',
      outcome: 'SUCCESSFUL',
      deliver: false,
    });
    await until(() => provider.transaction(transactionId)?.state === 'SUCCESSFUL', 'processing');

    // The forger knows a real transaction id and posts it first, for an order of their own.
    await provider.forge({ ipnUrl, transactionId, customData: 'order-of-the-forger' });
    await until(() => recorder.count('rejected') === 1, 'the rejected event');
    expect(recorder.of('rejected')[0]).toMatchObject({ reason: 'mismatch', mismatches: ['custom_data'] });

    // The transaction did succeed: the service's own record is delivered in the forgery's place, once.
    await until(() => recorder.count('successful') === 1, 'the successful event');
    expect(recorder.of('successful').map((n) => n.custom_data)).toEqual(['order-3']);
    expect(await ipn.reconcile(transactionId)).toMatchObject({ emitted: false });
  });

  test('a burst of resends and concurrent copies costs at most one status query per (id, state)', async () => {
    const { recorder, ipnUrl } = await partner();
    const paid = provider.initiate({
      amount: 1200,
      ipnUrl,
      customData: 'order-4',
      outcome: 'SUCCESSFUL',
      concurrent: 6,
      duplicates: 4,
    });
    const failed = provider.initiate({
      amount: 800,
      ipnUrl,
      customData: 'order-5',
      outcome: 'FAILED',
      concurrent: 3,
    });
    const reports = await Promise.all([paid.delivered, failed.delivered]);
    await until(() => recorder.count('successful') + recorder.count('failed') === 2, 'both events');

    // A copy that comes while the first is still being verified is answered 503 (its fate not decided yet):
    // a duplicate is sent again until answered 200; a concurrent copy is not, another one having its 200.
    // Every 200 but each notification's first is a duplicate.
    const statuses = reports.flatMap((report) => report.statuses);
    expect(statuses.every((status) => status === 200 || status === 503)).toBe(true);
    expect(reports[0]?.statuses.slice(6).join()).toMatch(/^(503,)*200(,(503,)*200){3}$/);
    expect(recorder.count('duplicate')).toBe(statuses.filter((status) => status === 200).length - 2);
    expect(provider.statusQueriesFor(paid.transactionId)).toBe(1);
    expect(provider.statusQueriesFor(failed.transactionId)).toBe(1);
  });

  test('a blocked service sees no more requests during the cool-down: verifications then fail fast and report error', async () => {
    // One attempt each: a retry would rightly wait for the cool-down (60 s) to end.
    const { client, recorder, ipnUrl } = await partner({ blockCooldownMs: 60_000 }, 1);
    provider.block();
    await provider.initiate({ amount: 100, ipnUrl, customData: 'order-6', outcome: 'SUCCESSFUL' }).delivered;
    await until(() => recorder.count('error') === 1, 'the first verification to give up');
    // The service answered 429 once: from now on, the cool-down.
    await provider.initiate({ amount: 200, ipnUrl, customData: 'order-7', outcome: 'SUCCESSFUL' }).delivered;
    await until(() => recorder.count('error') === 2, 'the second verification to give up');
    expect(provider.stats.statusQueries).toBe(1); // the 429; nothing during the cool-down
    expect(provider.stats.statusQueriesBlocked).toBe(1);
    expect(client.stats.refused).toBeGreaterThan(0);
    expect(recorder.of('error').map((event) => event.error.code)).toEqual([
      'IPN_VERIFY_UNAVAILABLE',
      'IPN_VERIFY_UNAVAILABLE',
    ]);
    expect(recorder.count('successful')).toBe(0);
  });

  test('reconcile delivers a transaction whose notification never came, once', async () => {
    const { ipn, recorder, ipnUrl } = await partner();
    const { transactionId } = provider.initiate({
      amount: 700,
      ipnUrl,
      customData: 'order-8',
      outcome: 'SUCCESSFUL',
      deliver: false,
    });
    await until(() => provider.transaction(transactionId)?.state === 'SUCCESSFUL', 'processing');

    expect(await ipn.reconcile(transactionId)).toMatchObject({
      emitted: true,
      record: { custom_data: 'order-8' },
    });
    expect(await ipn.reconcile(transactionId)).toMatchObject({ emitted: false });
    expect(recorder.count('successful')).toBe(1);
    expect(provider.statusQueriesFor(transactionId)).toBe(1);
  });
});
