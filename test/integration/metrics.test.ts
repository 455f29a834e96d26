import { Registry } from 'prom-client';
import { ipnRouter, type IpnRouter } from '../../lib/index.js';
import { registerIpnMetrics } from '../../lib/prometheus.js';
import { createStatusClient } from '../../lib/status/status-client.js';
import { MemoryInbox } from '../helpers/memory-inbox.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { listen, settle, type Running } from '../helpers/servers.js';
import { until } from '../helpers/until.js';

const servers: Running[] = [];
const routers: IpnRouter[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => server.close()));
  await Promise.all(routers.splice(0).map((router) => router.close()));
});

async function serve(ipn: IpnRouter) {
  routers.push(ipn);
  const running = await listen(ipn);
  servers.push(running);
  return (body: unknown, type = 'application/json') =>
    fetch(running.url, {
      method: 'POST',
      headers: { 'content-type': type },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });
}

describe('ipn.metrics()', () => {
  test('counts what the router received, dropped, rejected, emitted and failed, and the status queries', async () => {
    const genuine = uniquePayload();
    const failed = uniquePayload({ state: 'FAILED' });
    const known = { [String(genuine.transaction_id)]: genuine, [String(failed.transaction_id)]: failed };
    const fetchStatus = (_url: string | URL | Request, init?: RequestInit) => {
      const id = (JSON.parse(init?.body as string) as { transaction_ids: string }).transaction_ids;
      const record = known[id];
      const body = record
        ? { data: record, message: '', statut_code: 200 }
        : { data: [id], message: 'transaction not found', statut_code: 404 };
      return Promise.resolve(new Response(JSON.stringify(body)));
    };
    const client = createStatusClient({
      baseUrl: 'https://service.test/api_v1/transaction',
      apiKey: 'k',
      fetch: fetchStatus,
      minIntervalMs: 200, // a not-found is believed once repeated this much later
    });
    const ipn = ipnRouter({ verify: client, logger: quiet, verifyRetryDelayMs: 5 });
    ipn.on('failed', () => {
      throw new Error('refund service down');
    });
    const post = await serve(ipn);

    await post(genuine);
    // A resend, once the first copy is credited (while it is being verified, a resend is answered 503).
    await until(() => ipn.metrics().emitted.SUCCESSFUL === 1, 'the first copy credited');
    await post(genuine);
    await post(failed);
    await post(uniquePayload()); // forged: unknown to the service
    await post('{"transaction_id":', 'application/json'); // malformed
    await until(() => ipn.metrics().rejected === 1 && ipn.metrics().emitted.FAILED === 1, 'the events');
    await settle();

    expect(ipn.metrics()).toEqual({
      received: 4,
      duplicates: 1,
      invalid: 1,
      emitted: { SUCCESSFUL: 1, FAILED: 1, other: 0 },
      rejected: 1,
      unknownStates: 0,
      stale: 0,
      listenerErrors: 1,
      storeErrors: 0,
      verificationErrors: 0,
      verificationsShed: 0,
      deliveryAttempts: 0,
      dead: 0,
      conflicts: 0,
      statusQueries: expect.objectContaining({ shared: 0 }),
    });
    // Two for the genuine ones, and the forged id at least twice: a not-found is believed once repeated.
    expect(ipn.metrics().statusQueries?.made).toBeGreaterThanOrEqual(4);
  });

  test('at least once: counts delivery attempts and dead notifications', async () => {
    const ipn = ipnRouter({
      store: new MemoryInbox(),
      delivery: 'at-least-once',
      maxAttempts: 2,
      retryDelayMs: 5,
      recoveryIntervalMs: 20,
      logger: quiet,
    });
    ipn.on('successful', () => Promise.reject(new Error('ledger down')));
    const post = await serve(ipn);
    await post(uniquePayload());
    await until(() => ipn.metrics().dead === 1, 'the dead notification');
    expect(ipn.metrics()).toMatchObject({
      received: 1,
      deliveryAttempts: 2,
      dead: 1,
      listenerErrors: 2,
      emitted: { SUCCESSFUL: 0, FAILED: 0, other: 0 },
    });
    expect(ipn.metrics().statusQueries).toBeUndefined();
  });
});

test('at least once: a notification delivered on its third attempt counts as emitted once', async () => {
  const ipn = ipnRouter({
    store: new MemoryInbox(),
    delivery: 'at-least-once',
    retryDelayMs: 5,
    recoveryIntervalMs: 20,
    logger: quiet,
  });
  let calls = 0;
  ipn.on('successful', () => {
    calls += 1;
    if (calls < 3) throw new Error('ledger down');
  });
  const post = await serve(ipn);
  await post(uniquePayload());
  await until(() => ipn.metrics().emitted.SUCCESSFUL === 1, 'the delivery');
  await settle();
  expect(ipn.metrics()).toMatchObject({ deliveryAttempts: 3, emitted: { SUCCESSFUL: 1 }, listenerErrors: 2 });
});

describe('registerIpnMetrics (ipn-kit/prometheus)', () => {
  test('exports the counters to a prom-client registry, and each scrape adds only what is new', async () => {
    const ipn = ipnRouter({ logger: quiet });
    ipn.on('notification', () => {});
    const registry = new Registry();
    registerIpnMetrics(ipn, { registry });
    const post = await serve(ipn);
    const payload = uniquePayload();

    await post(payload);
    await post(payload);
    await settle();
    const first = await registry.metrics();
    expect(first).toMatch(/^ipn_kit_notifications_received_total 2$/m);
    expect(first).toMatch(/^ipn_kit_duplicates_total 1$/m);
    expect(first).toMatch(/^ipn_kit_emitted_total\{state="SUCCESSFUL"\} 1$/m);

    await post(uniquePayload({ state: 'FAILED' }));
    await settle();
    const second = await registry.metrics();
    expect(second).toMatch(/^ipn_kit_notifications_received_total 3$/m);
    expect(second).toMatch(/^ipn_kit_emitted_total\{state="FAILED"\} 1$/m);
    expect(second).toMatch(/^ipn_kit_emitted_total\{state="SUCCESSFUL"\} 1$/m);
  });

  test('the gauge paused is 1 while ipn.pause() holds delivery, 0 after resume()', async () => {
    const ipn = ipnRouter({ store: new MemoryInbox(), delivery: 'at-least-once', logger: quiet });
    routers.push(ipn);
    const registry = new Registry();
    registerIpnMetrics(ipn, { registry });
    expect(await registry.metrics()).toMatch(/^ipn_kit_paused 0$/m);
    await ipn.pause();
    expect(await registry.metrics()).toMatch(/^ipn_kit_paused 1$/m);
    await ipn.resume();
    expect(await registry.metrics()).toMatch(/^ipn_kit_paused 0$/m);
  });

  test('a prefix of your own, and a clear error for something that is not a router', () => {
    const registry = new Registry();
    registerIpnMetrics(ipnRouter({ logger: quiet }), { registry, prefix: 'shop_ipn_' });
    expect(registry.getSingleMetric('shop_ipn_dead_total')).toBeDefined();
    expect(() => registerIpnMetrics({} as never)).toThrow(/pass the router/);
  });
});
